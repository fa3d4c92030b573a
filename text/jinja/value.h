// Value: the dynamic value a chat template computes with, shaped like the Python objects
// jinja2 sees when transformers renders a template (None, bool, int, float, str, list, tuple,
// dict, callables, namespace) plus jinja2's Undefined. Printing, truthiness, equality and
// tojson follow Python exactly, because a rendered prompt must match transformers byte for
// byte. It does not evaluate anything: that is the interpreter's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace prism::text::jinja {

class Value;

// Positional and keyword arguments of a call, as Python would pass them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A template-visible function (global, bound method, macro). Errors are reported by throwing
// RenderError, caught at the render boundary (see interpreter.h).
using Function = std::function<Value(CallArgs&)>;

// Dict entries keep insertion order, as Python dicts do (tojson and items() print in that order).
using Entries = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, tuple, dict, function, name_space };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict(Entries entries);
  static Value function(std::string name, Function fn);
  static Value name_space(Entries entries);  // jinja2's namespace(): the one mutable object
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_tuple() const { return kind_ == Kind::tuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_function() const { return kind_ == Kind::function; }
  bool is_namespace() const { return kind_ == Kind::name_space; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : (is_float() ? static_cast<int64_t>(f_) : i_); }
  double as_double() const { return is_float() ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return s_; }  // string value, or an undefined's hint
  const std::vector<Value>& items() const { return *items_; }
  const Entries& entries() const { return *entries_; }
  Entries& mutable_entries() const { return *entries_; }  // namespace attributes only
  const Function& fn() const { return *fn_; }

  // dict/namespace lookup; nullptr when absent.
  const Value* find(std::string_view key) const;

  bool truthy() const;                // Python bool()
  std::string to_str() const;         // Python str(); undefined prints as ""
  std::string repr() const;           // Python repr()
  std::string type_name() const;      // for error messages: "dict object", "str object", ...
  // Python json.dumps(ensure_ascii=False, indent, separators, sort_keys) as transformers'
  // tojson filter calls it. indent < 0: single line.
  std::string to_json(int indent = -1, std::string item_sep = "", std::string key_sep = "",
                      bool sort_keys = false) const;

 private:
  void dump_json(std::string& out, int indent, int depth, const std::string& item_sep,
                 const std::string& key_sep, bool sort_keys) const;

  Kind kind_ = Kind::undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<std::vector<Value>> items_;  // list, tuple (immutable once built)
  std::shared_ptr<Entries> entries_;           // dict (immutable), namespace (mutable, shared)
  std::shared_ptr<Function> fn_;
};

// Python ==, deep; int, float and bool compare by value; dicts ignore order.
bool values_equal(const Value& a, const Value& b);

// Python float repr(): shortest round-trip digits, "1e-05", "1e+16", "2.0".
std::string python_float_repr(double d);

// UTF-8 <-> code points: Python strings index, slice and count code points.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);

}  // namespace prism::text::jinja

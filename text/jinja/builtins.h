// Builtins: what a template can do to a value — operators, attribute and item access,
// slicing, filters, tests, methods of str/dict/list and the global functions — each with the
// Python/jinja2 behaviour transformers' sandbox gives (mutating methods like list.append are
// refused as unsafe). Failures throw RenderError (see interpreter.h); internal to jinja/.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace prism::text::jinja {

[[noreturn]] void fail(const std::string& message);
// Using an undefined value (arithmetic, attribute, call) is an error naming it.
void require_defined(const Value& v);

// range, namespace, dict, raise_exception, strftime_now.
std::unordered_map<std::string, Value> global_functions();

std::vector<Value> iterate(const Value& v);  // Python iter(): dict -> keys, str -> chars
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value call_value(const Value& callee, CallArgs& args);
Value binary_op(const std::string& op, const Value& l, const Value& r);
bool compare(const std::string& op, const Value& l, const Value& r);

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
bool apply_test(const std::string& name, const Value& input, CallArgs& args);

}  // namespace prism::text::jinja

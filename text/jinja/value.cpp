// Value: Python-exact printing, equality and JSON of template values (see value.h).
#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace prism::text::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::integer;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::floating;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::string;
  v.s_ = std::move(s);
  return v;
}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::list;
  v.items_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::tuple;
  return v;
}
Value Value::dict(Entries entries) {
  Value v;
  v.kind_ = Kind::dict;
  v.entries_ = std::make_shared<Entries>(std::move(entries));
  return v;
}
Value Value::name_space(Entries entries) {
  Value v = dict(std::move(entries));
  v.kind_ = Kind::name_space;
  return v;
}
Value Value::function(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::function;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using J = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case J::null: return none();
    case J::boolean: return boolean(j.get<bool>());
    case J::number_integer: return integer(j.get<int64_t>());
    case J::number_unsigned: return integer(static_cast<int64_t>(j.get<uint64_t>()));
    case J::number_float: return floating(j.get<double>());
    case J::string: return string(j.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case J::object: {
      Entries entries;
      entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) entries.emplace_back(it.key(), from_json(it.value()));
      return dict(std::move(entries));
    }
    default: return none();  // binary / discarded: not produced by JSON text
  }
}

const Value* Value::find(std::string_view key) const {
  if (!entries_) return nullptr;
  for (const auto& [k, v] : *entries_)
    if (k == key) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return b_;
    case Kind::integer: return i_ != 0;
    case Kind::floating: return f_ != 0.0;
    case Kind::string: return !s_.empty();
    case Kind::list:
    case Kind::tuple: return !items_->empty();
    case Kind::dict: return !entries_->empty();
    default: return true;
  }
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits in scientific form, e.g. "1.2345e+02", then laid out the way
  // Python's repr does: positional when -4 <= exponent < 16, else scientific.
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp = std::atoi(sci.c_str() + e_pos + 1);
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return neg ? "-" + out : out;
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

namespace {

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

std::string Value::repr() const {
  if (is_string()) return string_repr(s_);
  return to_str();
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return b_ ? "True" : "False";
    case Kind::integer: return std::to_string(i_);
    case Kind::floating: return python_float_repr(f_);
    case Kind::string: return s_;
    case Kind::list:
    case Kind::tuple: {
      std::string out = is_list() ? "[" : "(";
      for (size_t i = 0; i < items_->size(); ++i) {
        if (i) out += ", ";
        out += (*items_)[i].repr();
      }
      if (is_tuple() && items_->size() == 1) out += ",";
      return out + (is_list() ? "]" : ")");
    }
    case Kind::dict: {
      std::string out = "{";
      for (size_t i = 0; i < entries_->size(); ++i) {
        if (i) out += ", ";
        out += string_repr((*entries_)[i].first) + ": " + (*entries_)[i].second.repr();
      }
      return out + "}";
    }
    case Kind::function: return "<function " + s_ + ">";
    case Kind::name_space: {
      std::string out = "<Namespace {";
      for (size_t i = 0; i < entries_->size(); ++i) {
        if (i) out += ", ";
        out += string_repr((*entries_)[i].first) + ": " + (*entries_)[i].second.repr();
      }
      return out + "}>";
    }
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list: return "list";
    case Kind::tuple: return "tuple";
    case Kind::dict: return "dict";
    case Kind::function: return "function";
    case Kind::name_space: return "Namespace";
  }
  return "object";
}

std::string Value::to_json(int indent, std::string item_sep, std::string key_sep, bool sort_keys) const {
  // json.dumps defaults: (", ", ": ") on one line, ("," , ": ") when indenting.
  if (item_sep.empty()) item_sep = indent >= 0 ? "," : ", ";
  if (key_sep.empty()) key_sep = ": ";
  std::string out;
  dump_json(out, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

// Throws nothing: an unserialisable value (undefined, function) is reported by the caller,
// which checks with json_serializable() first. Here they print as null defensively.
void Value::dump_json(std::string& out, int indent, int depth, const std::string& item_sep,
                      const std::string& key_sep, bool sort_keys) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * d, ' ');
  };
  switch (kind_) {
    case Kind::none:
    case Kind::undefined:
    case Kind::function: out += "null"; return;
    case Kind::boolean: out += b_ ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(i_); return;
    case Kind::floating:
      if (std::isnan(f_)) out += "NaN";
      else if (std::isinf(f_)) out += f_ < 0 ? "-Infinity" : "Infinity";
      else out += python_float_repr(f_);
      return;
    case Kind::string: json_string(out, s_); return;
    case Kind::list:
    case Kind::tuple: {
      if (items_->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      newline(depth + 1);
      for (size_t i = 0; i < items_->size(); ++i) {
        if (i) {
          out += item_sep;
          newline(depth + 1);
        }
        (*items_)[i].dump_json(out, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::dict:
    case Kind::name_space: {
      if (entries_->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> order;
      for (const auto& e : *entries_) order.push_back(&e);
      if (sort_keys)
        std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      newline(depth + 1);
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) {
          out += item_sep;
          newline(depth + 1);
        }
        json_string(out, order[i]->first);
        out += key_sep;
        order[i]->second.dump_json(out, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += '}';
      return;
    }
  }
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.is_sequence() && b.is_sequence()) {
    if (a.kind() != b.kind() || a.items().size() != b.items().size()) return false;
    for (size_t i = 0; i < a.items().size(); ++i)
      if (!values_equal(a.items()[i], b.items()[i])) return false;
    return true;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.str() == b.str();
    case Value::Kind::dict: {
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [k, v] : a.entries()) {
        const Value* other = b.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::function: return &a.fn() == &b.fn();
    case Value::Kind::name_space: return &a.entries() == &b.entries();
    default: return false;
  }
}

}  // namespace prism::text::jinja

// Builtins: Python/jinja2 semantics of operators, access, filters, tests and methods
// (see builtins.h). Error texts follow Python's and jinja2's so a failing template reads
// the same as under transformers.
#include "text/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <unordered_set>

#include <utf8proc.h>

namespace prism::text::jinja {

void fail(const std::string& message) { throw RenderError{message}; }

void require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.str().empty() ? "undefined value" : v.str());
}

namespace {

// ---- strings -------------------------------------------------------------------------

bool py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}
char32_t to_upper(char32_t c) { return c < 0x80 ? (c >= 'a' && c <= 'z' ? c - 32 : c) : utf8proc_toupper(c); }
char32_t to_lower(char32_t c) { return c < 0x80 ? (c >= 'A' && c <= 'Z' ? c + 32 : c) : utf8proc_tolower(c); }
bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }

std::string upper(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (char32_t& c : u) c = to_upper(c);
  return utf8_encode(u);
}
std::string lower(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (char32_t& c : u) c = to_lower(c);
  return utf8_encode(u);
}
std::string capitalize(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_upper(u[i]) : to_lower(u[i]);
  return utf8_encode(u);
}
std::string py_title(const std::string& s) {  // str.title()
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    const bool cased = is_cased(c);
    c = cased ? (prev_cased ? to_lower(c) : to_upper(c)) : c;
    prev_cased = cased;
  }
  return utf8_encode(u);
}
std::string jinja_title(const std::string& s) {  // the |title filter: words split on [-\s({[<]+
  std::u32string u = utf8_decode(s);
  bool at_start = true;
  for (char32_t& c : u) {
    const bool sep = py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      at_start = true;
      continue;
    }
    c = at_start ? to_upper(c) : to_lower(c);
    at_start = false;
  }
  return utf8_encode(u);
}

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set;
  const bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) set = utf8_decode(chars->to_str());
  auto drop = [&](char32_t c) { return ws ? py_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) ++b;
  if (right)
    while (e > b && drop(u[e - 1])) --e;
  return utf8_encode(u.substr(b, e - b));
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    std::u32string u = utf8_decode(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) out += to, ++n;
      out += utf8_encode(std::u32string(1, c));
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<Value> split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<Value> out;
  if (!sep || sep->is_none()) {
    std::u32string u = utf8_decode(s);
    size_t i = 0;
    while (true) {
      while (i < u.size() && py_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > i && py_space(u[e - 1])) --e;
        out.push_back(Value::string(utf8_encode(u.substr(i, e - i))));
        break;
      }
      size_t j = i;
      while (j < u.size() && !py_space(u[j])) ++j;
      out.push_back(Value::string(utf8_encode(u.substr(i, j - i))));
      i = j;
    }
    return out;
  }
  const std::string d = sep->to_str();
  if (d.empty()) fail("empty separator");
  size_t pos = 0;
  while (true) {
    const size_t f = s.find(d, pos);
    if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) break;
    out.push_back(Value::string(s.substr(pos, f - pos)));
    pos = f + d.size();
  }
  out.push_back(Value::string(s.substr(pos)));
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// ---- arguments -----------------------------------------------------------------------

const Value* arg(const CallArgs& a, size_t pos, const char* name) {
  if (pos < a.positional.size()) return &a.positional[pos];
  for (const auto& [k, v] : a.keyword)
    if (k == name) return &v;
  return nullptr;
}
bool arg_bool(const CallArgs& a, size_t pos, const char* name, bool def) {
  const Value* v = arg(a, pos, name);
  return v ? v->truthy() : def;
}
int64_t arg_int(const CallArgs& a, size_t pos, const char* name, int64_t def) {
  const Value* v = arg(a, pos, name);
  if (!v || v->is_none()) return def;
  if (!v->is_number()) fail("'" + v->type_name() + "' object cannot be interpreted as an integer");
  return v->as_int();
}
std::string arg_str(const CallArgs& a, size_t pos, const char* name, const std::string& def) {
  const Value* v = arg(a, pos, name);
  return v ? v->to_str() : def;
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return 0;
    case Value::Kind::string: return static_cast<int64_t>(utf8_decode(v.str()).size());
    case Value::Kind::list:
    case Value::Kind::tuple: return static_cast<int64_t>(v.items().size());
    case Value::Kind::dict: return static_cast<int64_t>(v.entries().size());
    default: fail("object of type '" + v.type_name() + "' has no len()");
  }
}

void check_json(const Value& v) {
  if (v.is_undefined() || v.is_function() || v.is_namespace())
    fail("Object of type " + v.type_name() + " is not JSON serializable");
  if (v.is_sequence())
    for (const Value& i : v.items()) check_json(i);
  if (v.is_dict())
    for (const auto& [k, i] : v.entries()) check_json(i);
}

// jinja2's attribute getter for map/selectattr/sort: "a.b.0" walks attributes and indices.
Value attr_path(const Value& obj, const std::string& path) {
  Value v = obj;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value::integer(std::atoll(part.c_str()))) : get_item(v, Value::string(part));
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

// Python < for sort/min/max; strings fold case unless case_sensitive.
bool less_than(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) return lower(a.str()) < lower(b.str());
  return compare("<", a, b);
}
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(lower(v.str())) : v;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

std::string type_error(const std::string& op, const Value& l, const Value& r) {
  return "unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'";
}

// str.format with "{}", "{0}", "{name}" fields (no format specs).
std::string py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t end = fmt.find('}', i);
      if (end == std::string::npos) fail("Single '{' encountered in format string");
      const std::string field = fmt.substr(i + 1, end - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) fail("unsupported str.format field '{" + field + "}'");
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t k = std::stoul(field);
        v = k < a.positional.size() ? &a.positional[k] : nullptr;
      } else {
        for (const auto& [k, kv] : a.keyword)
          if (k == field) v = &kv;
      }
      if (!v) fail("str.format: missing argument for '{" + field + "}'");
      out += v->to_str();
      i = end;
    } else {
      out += c;
    }
  }
  return out;
}

// printf-style "%s" formatting for the |format filter.
std::string printf_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    const char spec = fmt[i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    if (k >= a.positional.size()) fail("not enough arguments for format string");
    const Value& v = a.positional[k++];
    if (spec == 's') out += v.to_str();
    else if (spec == 'r') out += v.repr();
    else if (spec == 'd' || spec == 'i') out += std::to_string(v.as_int());
    else fail(std::string("unsupported format character '") + spec + "'");
  }
  return out;
}

// ---- methods -------------------------------------------------------------------------

const std::unordered_set<std::string>& str_methods() {
  static const std::unordered_set<std::string> m = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "replace", "startswith", "endswith",
      "upper", "lower", "title", "capitalize", "find", "rfind", "count", "join", "format", "isdigit",
      "isalpha", "isalnum", "isspace", "islower", "isupper", "removeprefix", "removesuffix"};
  return m;
}
const std::unordered_set<std::string>& unsafe_methods(const Value& v) {
  static const std::unordered_set<std::string> list = {"append", "extend", "insert", "pop", "remove",
                                                       "reverse", "sort", "clear"};
  static const std::unordered_set<std::string> dict = {"pop", "popitem", "update", "setdefault", "clear"};
  static const std::unordered_set<std::string> none;
  return v.is_list() ? list : v.is_dict() ? dict : none;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) fail(std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str");
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_sequence()) return std::any_of(affix.items().begin(), affix.items().end(), one);
  return one(affix);
}

Value str_method(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip") return Value::string(strip(s, arg(a, 0, "chars"), true, true));
  if (name == "lstrip") return Value::string(strip(s, arg(a, 0, "chars"), true, false));
  if (name == "rstrip") return Value::string(strip(s, arg(a, 0, "chars"), false, true));
  if (name == "split") return Value::list(split(s, arg(a, 0, "sep"), arg_int(a, 1, "maxsplit", -1)));
  if (name == "rsplit") {
    if (arg_int(a, 1, "maxsplit", -1) >= 0) fail("unsupported str.rsplit with maxsplit");
    return Value::list(split(s, arg(a, 0, "sep"), -1));
  }
  if (name == "splitlines") {
    std::vector<Value> lines;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t e = s.find_first_of("\n\r", pos);
      if (e == std::string::npos) e = s.size();
      lines.push_back(Value::string(s.substr(pos, e - pos)));
      pos = e + ((e + 1 < s.size() && s[e] == '\r' && s[e + 1] == '\n') ? 2 : 1);
    }
    return Value::list(std::move(lines));
  }
  if (name == "replace")
    return Value::string(replace(s, arg_str(a, 0, "old", ""), arg_str(a, 1, "new", ""), arg_int(a, 2, "count", -1)));
  if (name == "startswith" || name == "endswith") {
    const Value* x = arg(a, 0, "prefix");
    if (!x) fail(name + "() takes at least 1 argument (0 given)");
    return Value::boolean(affix_match(s, *x, name == "startswith"));
  }
  if (name == "upper") return Value::string(upper(s));
  if (name == "lower") return Value::string(lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(capitalize(s));
  if (name == "find" || name == "rfind") {
    const std::string x = arg_str(a, 0, "sub", "");
    const size_t f = name == "find" ? s.find(x) : s.rfind(x);
    if (f == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<int64_t>(utf8_decode(s.substr(0, f)).size()));
  }
  if (name == "count") {
    const std::string x = arg_str(a, 0, "sub", "");
    if (x.empty()) return Value::integer(static_cast<int64_t>(utf8_decode(s).size()) + 1);
    int64_t n = 0;
    for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    const Value* it = arg(a, 0, "iterable");
    if (!it) fail("join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*it)) {
      if (!v.is_string()) fail("sequence item: expected str instance, " + v.type_name() + " found");
      if (!first) out += s;
      out += v.str();
      first = false;
    }
    return Value::string(out);
  }
  if (name == "format") return Value::string(py_format(s, a));
  if (name == "removeprefix") {
    const std::string x = arg_str(a, 0, "prefix", "");
    return Value::string(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
  }
  if (name == "removesuffix") {
    const std::string x = arg_str(a, 0, "suffix", "");
    return Value::string(!x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0
                             ? s.substr(0, s.size() - x.size())
                             : s);
  }
  // is* predicates
  std::u32string u = utf8_decode(s);
  auto all = [&](auto pred) { return Value::boolean(!u.empty() && std::all_of(u.begin(), u.end(), pred)); };
  if (name == "isdigit") return all([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isspace") return all(py_space);
  if (name == "isalpha")
    return all([](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && is_cased(c)); });
  if (name == "isalnum")
    return all([](char32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && is_cased(c)); });
  if (name == "islower" || name == "isupper") {
    bool any_cased = false, ok = true;
    for (char32_t c : u) {
      if (!is_cased(c)) continue;
      any_cased = true;
      ok &= name == "islower" ? to_lower(c) == c : to_upper(c) == c;
    }
    return Value::boolean(any_cased && ok);
  }
  fail("'str' object has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name, CallArgs& a) {
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.entries()) out.push_back(Value::tuple({Value::string(k), v}));
    return Value::list(std::move(out));
  }
  if (name == "keys") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.entries()) out.push_back(Value::string(k));
    return Value::list(std::move(out));
  }
  if (name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.entries()) out.push_back(v);
    return Value::list(std::move(out));
  }
  if (name == "get") {
    const Value* key = arg(a, 0, "key");
    if (!key) fail("get expected at least 1 argument, got 0");
    const Value* def = arg(a, 1, "default");
    const Value* v = key->is_string() ? d.find(key->str()) : nullptr;
    return v ? *v : def ? *def : Value::none();
  }
  if (name == "copy") return Value::dict(d.entries());
  fail("'dict' object has no attribute '" + name + "'");
}

Value list_method(const Value& l, const std::string& name, CallArgs& a) {
  const Value* x = arg(a, 0, "value");
  if (name == "index" && x) {
    for (size_t i = 0; i < l.items().size(); ++i)
      if (values_equal(l.items()[i], *x)) return Value::integer(static_cast<int64_t>(i));
    fail(x->repr() + " is not in list");
  }
  if (name == "count" && x)
    return Value::integer(std::count_if(l.items().begin(), l.items().end(), [&](const Value& v) { return values_equal(v, *x); }));
  if (name == "copy") return Value::list(l.items());
  fail("'" + l.type_name() + "' object has no attribute '" + name + "'");
}

bool has_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return str_methods().count(name) > 0;
  if (obj.is_dict()) return name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy";
  if (obj.is_sequence()) return name == "index" || name == "count" || (obj.is_list() && name == "copy");
  return false;
}

Value bound_method(const Value& obj, const std::string& name) {
  return Value::function(name, [obj, name](CallArgs& a) {
    if (obj.is_string()) return str_method(obj.str(), name, a);
    if (obj.is_dict()) return dict_method(obj, name, a);
    return list_method(obj, name, a);
  });
}

// ---- globals -------------------------------------------------------------------------

Value range_fn(CallArgs& a) {
  int64_t start = 0, stop = 0, step = 1;
  const size_t n = a.positional.size();
  auto get = [&](size_t i) {
    const Value& v = a.positional[i];
    if (!v.is_int() && !v.is_bool()) fail("'" + v.type_name() + "' object cannot be interpreted as an integer");
    return v.as_int();
  };
  if (n == 1) {
    stop = get(0);
  } else if (n == 2 || n == 3) {
    start = get(0);
    stop = get(1);
    if (n == 3) step = get(2);
  } else {
    fail("range expected 1 to 3 arguments, got " + std::to_string(n));
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(Value::integer(i));
    if (out.size() > 100000) fail("range too big (the sandbox limit is 100000 items)");
  }
  return Value::list(std::move(out));
}

Entries kwargs_entries(CallArgs& a, const char* fn) {
  Entries e;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) fail(std::string(fn) + "() positional argument must be a dict");
    for (const auto& kv : p.entries()) e.push_back(kv);
  }
  for (const auto& [k, v] : a.keyword) {
    auto it = std::find_if(e.begin(), e.end(), [&](const auto& kv) { return kv.first == k; });
    if (it != e.end()) it->second = v;
    else e.emplace_back(k, v);
  }
  return e;
}

}  // namespace

std::unordered_map<std::string, Value> global_functions() {
  std::unordered_map<std::string, Value> g;
  g["range"] = Value::function("range", range_fn);
  g["namespace"] = Value::function("namespace", [](CallArgs& a) { return Value::name_space(kwargs_entries(a, "namespace")); });
  g["dict"] = Value::function("dict", [](CallArgs& a) { return Value::dict(kwargs_entries(a, "dict")); });
  g["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
    throw RenderError{a.positional.empty() ? std::string() : a.positional[0].to_str(), true};
  });
  g["strftime_now"] = Value::function("strftime_now", [](CallArgs& a) {
    const std::string fmt = arg_str(a, 0, "format", "");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
  return g;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return {};
    case Value::Kind::list:
    case Value::Kind::tuple: return v.items();
    case Value::Kind::dict: {
      std::vector<Value> keys;
      for (const auto& [k, x] : v.entries()) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::string: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.str())) chars.push_back(Value::string(utf8_encode(std::u32string(1, c))));
      return chars;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (unsafe_methods(obj).count(name))
    fail("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
  if (has_method(obj, name)) return bound_method(obj, name);
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.find(name)) return *v;
  }
  if (obj.is_none()) return Value::undefined("'None' has no attribute '" + name + "'");
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (key.is_string()) {
    if (obj.is_dict() || obj.is_namespace()) {
      if (const Value* v = obj.find(key.str())) return *v;
    }
    return get_attr(obj, key.str());
  }
  if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_string()) {
      std::u32string u = utf8_decode(obj.str());
      const int64_t n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + key.to_str());
      return Value::string(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
    }
    const int64_t n = static_cast<int64_t>(obj.items().size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("'" + obj.type_name() + " object' has no element " + key.to_str());
    return obj.items()[static_cast<size_t>(i)];
  }
  if (obj.is_none()) return Value::undefined("'None' has no attribute '" + key.to_str() + "'");
  return Value::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  require_defined(obj);
  auto index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  const int64_t step = index(step_v, "step").value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  std::u32string u;
  int64_t n;
  if (obj.is_string()) {
    u = utf8_decode(obj.str());
    n = static_cast<int64_t>(u.size());
  } else if (obj.is_sequence()) {
    n = static_cast<int64_t>(obj.items().size());
  } else {
    fail("'" + obj.type_name() + "' object is not subscriptable");
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(index(start_v, "start"), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(index(stop_v, "stop"), step > 0 ? n : -1);
  std::vector<size_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::u32string out;
    for (size_t i : picks) out += u[i];
    return Value::string(utf8_encode(out));
  }
  std::vector<Value> out;
  for (size_t i : picks) out.push_back(obj.items()[i]);
  return obj.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

Value call_value(const Value& callee, CallArgs& args) {
  require_defined(callee);
  if (!callee.is_function()) fail("'" + callee.type_name() + "' object is not callable");
  return callee.fn()(args);
}

Value binary_op(const std::string& op, const Value& l, const Value& r) {
  if (op == "~") return Value::string(l.to_str() + r.to_str());
  require_defined(l);
  require_defined(r);
  const bool nums = l.is_number() && r.is_number();
  const bool ints = nums && !l.is_float() && !r.is_float();
  if (op == "+") {
    if (ints) return Value::integer(l.as_int() + r.as_int());
    if (nums) return Value::floating(l.as_double() + r.as_double());
    if (l.is_string() && r.is_string()) return Value::string(l.str() + r.str());
    if (l.is_sequence() && l.kind() == r.kind()) {
      std::vector<Value> items = l.items();
      items.insert(items.end(), r.items().begin(), r.items().end());
      return l.is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (l.is_string()) fail("can only concatenate str (not \"" + r.type_name() + "\") to str");
    if (l.is_list()) fail("can only concatenate list (not \"" + r.type_name() + "\") to list");
    fail(type_error("+", l, r));
  }
  if (op == "-") {
    if (ints) return Value::integer(l.as_int() - r.as_int());
    if (nums) return Value::floating(l.as_double() - r.as_double());
    fail(type_error("-", l, r));
  }
  if (op == "*") {
    if (ints) return Value::integer(l.as_int() * r.as_int());
    if (nums) return Value::floating(l.as_double() * r.as_double());
    const Value& seq = l.is_number() ? r : l;
    const Value& count = l.is_number() ? l : r;
    if ((count.is_int() || count.is_bool()) && (seq.is_string() || seq.is_sequence())) {
      const int64_t k = std::max<int64_t>(0, count.as_int());
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < k; ++i) out += seq.str();
        return Value::string(out);
      }
      std::vector<Value> out;
      for (int64_t i = 0; i < k; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
      return seq.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
    }
    fail(type_error("*", l, r));
  }
  if (op == "/" || op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && l.is_string()) fail("unsupported printf-style '%' string formatting (use the format filter)");
      fail(type_error(op, l, r));
    }
    if (r.as_double() == 0) fail(ints && op != "/" ? "integer division or modulo by zero" : "division by zero");
    if (op == "/") return Value::floating(l.as_double() / r.as_double());
    if (ints) return Value::integer(op == "//" ? floor_div(l.as_int(), r.as_int()) : floor_mod(l.as_int(), r.as_int()));
    const double a = l.as_double(), b = r.as_double();
    if (op == "//") return Value::floating(std::floor(a / b));
    double m = std::fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return Value::floating(m);
  }
  if (op == "**") {
    if (ints && r.as_int() >= 0) {
      int64_t out = 1;
      for (int64_t i = 0; i < r.as_int(); ++i) out *= l.as_int();
      return Value::integer(out);
    }
    if (nums) return Value::floating(std::pow(l.as_double(), r.as_double()));
    fail(type_error("** or pow()", l, r));
  }
  fail("unknown operator '" + op + "'");
}

bool compare(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return values_equal(l, r);
  if (op == "!=") return !values_equal(l, r);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (r.is_string()) {
      if (!l.is_string()) fail("'in <string>' requires string as left operand, not " + l.type_name());
      found = r.str().find(l.str()) != std::string::npos;
    } else if (r.is_sequence()) {
      found = std::any_of(r.items().begin(), r.items().end(), [&](const Value& v) { return values_equal(v, l); });
    } else if (r.is_dict() || r.is_namespace()) {
      found = l.is_string() && r.find(l.str()) != nullptr;
    } else if (!r.is_undefined()) {
      fail("argument of type '" + r.type_name() + "' is not iterable");
    }
    return op == "in" ? found : !found;
  }
  require_defined(l);
  require_defined(r);
  int c = 0;
  if (l.is_number() && r.is_number()) {
    const double a = l.as_double(), b = r.as_double();
    if (!l.is_float() && !r.is_float()) c = l.as_int() < r.as_int() ? -1 : l.as_int() > r.as_int() ? 1 : 0;
    else c = a < b ? -1 : a > b ? 1 : 0;
  } else if (l.is_string() && r.is_string()) {
    c = l.str().compare(r.str());  // UTF-8 byte order is code point order
    c = c < 0 ? -1 : c > 0 ? 1 : 0;
  } else if (l.is_sequence() && r.is_sequence() && l.kind() == r.kind()) {
    const auto& a = l.items();
    const auto& b = r.items();
    size_t i = 0;
    while (i < a.size() && i < b.size() && values_equal(a[i], b[i])) ++i;
    if (i < a.size() && i < b.size()) c = compare("<", a[i], b[i]) ? -1 : 1;
    else c = a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
  } else {
    fail("'" + op + "' not supported between instances of '" + l.type_name() + "' and '" + r.type_name() + "'");
  }
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  fail("unknown comparison '" + op + "'");
}

// ---- filters -------------------------------------------------------------------------

namespace {
const char* const kFilters[] = {
    "abs",      "attr",   "capitalize", "count",   "d",       "default",   "dictsort", "e",
    "escape",   "first",  "float",      "forceescape", "format", "indent", "int",      "items",
    "join",     "last",   "length",     "list",    "lower",   "map",       "max",      "min",
    "reject",   "rejectattr", "replace", "reverse", "round",  "safe",      "select",   "selectattr",
    "sort",     "string", "sum",        "title",   "tojson",  "trim",      "unique",   "upper",
    "wordcount"};
const char* const kTests[] = {
    "!=",       "<",       "<=",       "==",      ">",     ">=",       "boolean", "callable", "defined",
    "divisibleby", "eq",   "equalto",  "escaped", "even",  "false",    "filter",  "float",    "ge",
    "greaterthan", "gt",   "in",       "integer", "iterable", "le",    "lessthan", "lower",   "lt",
    "mapping",  "ne",      "none",     "number",  "odd",   "sameas",   "sequence", "string",  "test",
    "true",     "undefined", "upper"};

// Applies a select/reject style condition: a test by name, or truthiness without one.
bool passes(const Value& v, const CallArgs& a, size_t test_pos) {
  if (a.positional.size() <= test_pos) return v.truthy();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(test_pos) + 1, a.positional.end());
  return apply_test(a.positional[test_pos].to_str(), v, rest);
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const Value* attribute) {
  auto key = [&](const Value& v) {
    return sort_key(attribute && !attribute->is_none() ? attr_path(v, attribute->to_str()) : v, case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x), true) : less_than(key(x), key(y), true);
  });
  return items;
}

Value round_value(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) fail("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float() && precision >= 0) return Value::integer(v.as_int());
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value::floating(std::nearbyint(v.as_double() * scale) / scale);  // banker's, as Python
  }
  if (method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value to_int(const Value& v, const Value* def) {
  const Value fallback = def ? *def : Value::integer(0);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value::integer(static_cast<int64_t>(v.as_double())) : fallback;
  if (v.is_string()) {
    const std::string s = strip(v.str(), nullptr, true, true);
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0') return Value::integer(i);
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0' && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
  }
  return fallback;
}

Value to_float(const Value& v, const Value* def) {
  const Value fallback = def ? *def : Value::floating(0.0);
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string()) {
    const std::string s = strip(v.str(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::floating(d);
  }
  return fallback;
}

std::string indent(std::string s, const Value* width, bool first, bool blank) {
  const std::string pad = width && width->is_string() ? width->str()
                                                       : std::string(static_cast<size_t>(width ? width->as_int() : 4), ' ');
  s += "\n";  // jinja2's quirk so splitlines keeps a trailing empty line
  std::vector<std::string> lines;
  CallArgs none;
  const Value split = str_method(s, "splitlines", none);  // named: a range-for over a temporary's
                                                          // member would read freed memory
  for (const Value& l : split.items()) lines.push_back(l.str());
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return out;
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return std::find_if(std::begin(kFilters), std::end(kFilters), [&](const char* f) { return name == f; }) != std::end(kFilters);
}
bool is_known_test(const std::string& name) {
  return std::find_if(std::begin(kTests), std::end(kTests), [&](const char* f) { return name == f; }) != std::end(kTests);
}

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "default" || name == "d") {
    const Value* def = arg(a, 0, "default_value");
    const bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value::string("");
    return v;
  }
  if (name == "safe") return v.is_string() ? v : Value::string(v.to_str());
  if (name == "string") return Value::string(v.to_str());
  if (name == "length" || name == "count") return Value::integer(length(v));
  if (name == "tojson") {
    check_json(v);
    const Value* ind = arg(a, 1, "indent");
    const Value* seps = arg(a, 2, "separators");
    std::string item_sep, key_sep;
    if (seps && seps->is_sequence() && seps->items().size() == 2) {
      item_sep = seps->items()[0].to_str();
      key_sep = seps->items()[1].to_str();
    }
    const int indent_n = ind && !ind->is_none() ? static_cast<int>(ind->as_int()) : -1;
    return Value::string(v.to_json(indent_n, item_sep, key_sep, arg_bool(a, 3, "sort_keys", false)));
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) fail("items filter: can only get item pairs from a mapping");
    CallArgs none;
    return dict_method(v, "items", none);
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined(std::string("No ") + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const std::string sep = arg_str(a, 0, "d", "");
    const Value* attribute = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      out += (attribute && !attribute->is_none() ? attr_path(item, attribute->to_str()) : item).to_str();
      first = false;
    }
    return Value::string(out);
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value* attribute = arg(a, 99, "attribute");
    for (const Value& item : iterate(v)) {
      if (attribute) {
        Value x = attr_path(item, attribute->to_str());
        const Value* def = arg(a, 99, "default");
        out.push_back(x.is_undefined() && def ? *def : x);
      } else {
        if (a.positional.empty()) fail("map requires a filter argument");
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        rest.keyword = a.keyword;
        out.push_back(apply_filter(a.positional[0].to_str(), item, rest));
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") {
    std::vector<Value> out;
    for (const Value& item : iterate(v))
      if (passes(item, a, 0) == (name == "select")) out.push_back(item);
    return Value::list(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (a.positional.empty()) fail(name + " requires an attribute name");
    const std::string attribute = a.positional[0].to_str();
    std::vector<Value> out;
    for (const Value& item : iterate(v))
      if (passes(attr_path(item, attribute), a, 1) == (name == "selectattr")) out.push_back(item);
    return Value::list(std::move(out));
  }
  if (name == "unique") {
    const bool cs = arg_bool(a, 0, "case_sensitive", false);
    const Value* attribute = arg(a, 1, "attribute");
    std::vector<Value> out, seen;
    for (const Value& item : iterate(v)) {
      Value key = sort_key(attribute && !attribute->is_none() ? attr_path(item, attribute->to_str()) : item, cs);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "sort")
    return Value::list(sorted(iterate(v), arg_bool(a, 0, "reverse", false), arg_bool(a, 1, "case_sensitive", false),
                              arg(a, 2, "attribute")));
  if (name == "dictsort") {
    if (!v.is_dict()) fail("dictsort: value is not a mapping");
    const bool cs = arg_bool(a, 0, "case_sensitive", false);
    const bool by_value = arg_str(a, 1, "by", "key") == "value";
    const bool reverse = arg_bool(a, 2, "reverse", false);
    CallArgs none;
    std::vector<Value> items = dict_method(v, "items", none).items();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const Value& kx = x.items()[by_value ? 1 : 0];
      const Value& ky = y.items()[by_value ? 1 : 0];
      return reverse ? less_than(ky, kx, cs) : less_than(kx, ky, cs);
    });
    return Value::list(std::move(items));
  }
  if (name == "min" || name == "max") {
    std::vector<Value> items = sorted(iterate(v), name == "max", arg_bool(a, 0, "case_sensitive", false), arg(a, 1, "attribute"));
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    return items.front();
  }
  if (name == "sum") {
    const Value* attribute = arg(a, 0, "attribute");
    const Value* start = arg(a, 1, "start");
    Value total = start ? *start : Value::integer(0);
    for (const Value& item : iterate(v))
      total = binary_op("+", total, attribute && !attribute->is_none() ? attr_path(item, attribute->to_str()) : item);
    return total;
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = utf8_decode(v.str());
      std::reverse(u.begin(), u.end());
      return Value::string(utf8_encode(u));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "attr") return get_attr(v, arg_str(a, 0, "name", ""));
  if (name == "int") return to_int(v, arg(a, 0, "default"));
  if (name == "float") return to_float(v, arg(a, 0, "default"));
  if (name == "abs") {
    if (!v.is_number()) fail("bad operand type for abs(): '" + v.type_name() + "'");
    return v.is_float() ? Value::floating(std::fabs(v.as_double())) : Value::integer(std::llabs(v.as_int()));
  }
  if (name == "round") return round_value(v, arg_int(a, 0, "precision", 0), arg_str(a, 1, "method", "common"));
  if (name == "format") return Value::string(printf_format(v.to_str(), a));
  if (name == "wordcount") return Value::integer(static_cast<int64_t>(split(v.to_str(), nullptr, -1).size()));

  // String filters: the input is converted with str() first, as jinja2's soft_str does.
  const std::string s = v.to_str();
  if (name == "trim") return Value::string(strip(s, arg(a, 0, "chars"), true, true));
  if (name == "upper") return Value::string(upper(s));
  if (name == "lower") return Value::string(lower(s));
  if (name == "title") return Value::string(jinja_title(s));
  if (name == "capitalize") return Value::string(capitalize(s));
  if (name == "replace")
    return Value::string(replace(s, arg_str(a, 0, "old", ""), arg_str(a, 1, "new", ""), arg_int(a, 2, "count", -1)));
  if (name == "indent")
    return Value::string(indent(s, arg(a, 0, "width"), arg_bool(a, 1, "first", false), arg_bool(a, 2, "blank", false)));
  if (name == "escape" || name == "e" || name == "forceescape") return Value::string(html_escape(s));
  fail("unsupported filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  const Value* other = arg(a, 0, "other");
  auto need = [&]() -> const Value& {
    if (!other) fail("test '" + name + "' needs an argument");
    return *other;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && str_method(v.str(), "islower", a).as_bool();
  if (name == "upper") return v.is_string() && str_method(v.str(), "isupper", a).as_bool();
  if (name == "even" || name == "odd") {
    if (!v.is_number()) fail("test '" + name + "': not a number");
    return (floor_mod(v.as_int(), 2) == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const int64_t d = need().as_int();
    if (d == 0) fail("integer division or modulo by zero");
    return floor_mod(v.as_int(), d) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, need());
  if (name == "ne" || name == "!=") return !values_equal(v, need());
  if (name == "lt" || name == "lessthan" || name == "<") return compare("<", v, need());
  if (name == "le" || name == "<=") return compare("<=", v, need());
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(">", v, need());
  if (name == "ge" || name == ">=") return compare(">=", v, need());
  if (name == "in") return compare("in", v, need());
  if (name == "sameas") {
    const Value& o = need();
    if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
    if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
    // CPython caches small ints, so `1 is 1` holds; other objects are never the same here.
    return v.is_int() && o.is_int() && v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  }
  if (name == "filter") return v.is_string() && is_known_filter(v.str());
  if (name == "test") return v.is_string() && is_known_test(v.str());
  fail("unsupported test '" + name + "'");
}

}  // namespace prism::text::jinja

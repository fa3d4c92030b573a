// api/json_fields.cpp: typed field getters; nlohmann's exceptions stop here.
#include "api/json_fields.h"

#include <cmath>

namespace prism::api {

const char* json_type_name(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

namespace {

}  // namespace

JsonFields::JsonFields(std::string_view body) {
  owned_ = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (owned_.is_discarded()) {
    // Re-parse with exceptions only to get the position; the happy path never throws.
    std::string detail = "parse error";
    try {
      nlohmann::json ignored = nlohmann::json::parse(body);
      (void)ignored;
    } catch (const nlohmann::json::parse_error& e) {
      detail = "parse error at byte " + std::to_string(e.byte);
    }
    owned_ = nlohmann::json::object();
    error_ = invalid_json(detail);
  } else if (!owned_.is_object()) {
    error_ = invalid_json(std::string("expected a JSON object, got ") + json_type_name(owned_));
    owned_ = nlohmann::json::object();
  }
}

JsonFields::JsonFields(const nlohmann::json& object, std::string prefix) : prefix_(std::move(prefix)) {
  if (object.is_object()) {
    obj_ = &object;
  } else {
    owned_ = nlohmann::json::object();
    error_ = invalid_field(prefix_.empty() ? "body" : prefix_.substr(0, prefix_.size() - 1),
                           std::string("expected an object, got ") + json_type_name(object) + ".");
  }
}

bool JsonFields::has(std::string_view field) const { return find(field) != nullptr; }

const nlohmann::json* JsonFields::find(std::string_view field) const {
  auto it = obj_->find(field);
  if (it == obj_->end() || it->is_null()) return nullptr;
  return &*it;
}

void JsonFields::fail(std::string_view field, std::string_view problem) {
  if (!error_) error_ = invalid_field(name(field), problem);
}

void JsonFields::fail_missing(std::string_view field) {
  error_ = invalid_field(name(field), "this field is required.");
  error_->message = "Missing required parameter: '" + name(field) + "'.";
  error_->code = "missing_required_parameter";
}

std::string JsonFields::required_string(std::string_view field) {
  if (!ok()) return {};
  const nlohmann::json* v = find(field);
  if (!v) {
    fail_missing(field);
    return {};
  }
  if (!v->is_string()) {
    fail(field, std::string("expected a string, got ") + json_type_name(*v) + ".");
    return {};
  }
  return v->get<std::string>();
}

std::string JsonFields::optional_string(std::string_view field, std::string fallback) {
  if (!ok()) return fallback;
  const nlohmann::json* v = find(field);
  if (!v) return fallback;
  if (!v->is_string()) {
    fail(field, std::string("expected a string, got ") + json_type_name(*v) + ".");
    return fallback;
  }
  return v->get<std::string>();
}

int64_t JsonFields::required_int(std::string_view field, int64_t lo, int64_t hi) {
  if (!ok()) return lo;
  if (!find(field)) {
    fail_missing(field);
    return lo;
  }
  return optional_int(field, lo, lo, hi);
}

int64_t JsonFields::optional_int(std::string_view field, int64_t fallback, int64_t lo, int64_t hi) {
  if (!ok()) return fallback;
  const nlohmann::json* v = find(field);
  if (!v) return fallback;
  if (!v->is_number_integer() && !v->is_number_unsigned()) {
    fail(field, std::string("expected an integer, got ") + json_type_name(*v) + ".");
    return fallback;
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    fail(field, "must be at most " + std::to_string(hi) + ".");
    return fallback;
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    fail(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ".");
    return fallback;
  }
  return x;
}

double JsonFields::optional_number(std::string_view field, double fallback, double lo, double hi) {
  if (!ok()) return fallback;
  const nlohmann::json* v = find(field);
  if (!v) return fallback;
  if (!v->is_number()) {
    fail(field, std::string("expected a number, got ") + json_type_name(*v) + ".");
    return fallback;
  }
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    nlohmann::json range = {lo, hi};  // prints 2 rather than 2.000000
    fail(field, "must be between " + range[0].dump() + " and " + range[1].dump() + ".");
    return fallback;
  }
  return x;
}

bool JsonFields::optional_bool(std::string_view field, bool fallback) {
  if (!ok()) return fallback;
  const nlohmann::json* v = find(field);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    fail(field, std::string("expected a boolean, got ") + json_type_name(*v) + ".");
    return fallback;
  }
  return v->get<bool>();
}

std::vector<std::string> JsonFields::required_strings(std::string_view field) {
  if (!ok()) return {};
  const nlohmann::json* v = find(field);
  if (!v) {
    fail_missing(field);
    return {};
  }
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array() || v->empty()) {
    fail(field, v->is_array() ? "expected a non-empty array of strings."
                              : std::string("expected a string or an array of strings, got ") +
                                    json_type_name(*v) + ".");
    return {};
  }
  std::vector<std::string> out;
  out.reserve(v->size());
  for (std::size_t i = 0; i < v->size(); ++i) {
    const nlohmann::json& e = (*v)[i];
    if (!e.is_string()) {
      fail(std::string(field) + "[" + std::to_string(i) + "]",
           std::string("expected a string, got ") + json_type_name(e) + ".");
      return {};
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::string JsonFields::optional_enum(std::string_view field, std::vector<std::string_view> allowed,
                                      std::string fallback) {
  std::string s = optional_string(field, fallback);
  if (!ok() || !has(field)) return s;
  for (std::string_view a : allowed)
    if (s == a) return s;
  std::string list;
  for (std::string_view a : allowed) list += (list.empty() ? "'" : ", '") + std::string(a) + "'";
  fail(field, "'" + s + "' is not one of " + list + ".");
  return fallback;
}

}  // namespace prism::api

// api/json_fields.h: reading a JSON request body into native values, naming the field in
// the first error (OpenAI's 400 shape, param = the field). Handlers parse at once:
//   JsonFields f(request.body);
//   std::string model = f.required_string("model");
//   double t = f.optional_number("temperature", 1.0, 0.0, 2.0);
//   if (!f.ok()) return (void)responder.send(error_response(f.error()));
// After the first error every getter returns its default and the error stays the first one.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/errors.h"

namespace prism::api {

// "a string", "an integer", "an array", ... for error messages.
const char* json_type_name(const nlohmann::json& v);

class JsonFields {
 public:
  // Parses body; it must be a JSON object (else: invalid_json error).
  explicit JsonFields(std::string_view body);
  // Reads fields of an already parsed object (a nested object: prefix names it, "prism.").
  JsonFields(const nlohmann::json& object, std::string prefix);
  JsonFields(const JsonFields&) = delete;  // obj_ may point at owned_
  JsonFields& operator=(const JsonFields&) = delete;

  bool ok() const { return !error_.has_value(); }
  const ApiError& error() const { return *error_; }
  const nlohmann::json& json() const { return *obj_; }
  bool has(std::string_view field) const;

  std::string required_string(std::string_view field);
  std::string optional_string(std::string_view field, std::string fallback = {});
  // Integers: JSON integers only (1.5 is refused), within [lo, hi].
  int64_t required_int(std::string_view field, int64_t lo = std::numeric_limits<int64_t>::min(),
                       int64_t hi = std::numeric_limits<int64_t>::max());
  int64_t optional_int(std::string_view field, int64_t fallback,
                       int64_t lo = std::numeric_limits<int64_t>::min(),
                       int64_t hi = std::numeric_limits<int64_t>::max());
  double optional_number(std::string_view field, double fallback,
                         double lo = -std::numeric_limits<double>::infinity(),
                         double hi = std::numeric_limits<double>::infinity());
  bool optional_bool(std::string_view field, bool fallback);
  // A string or an array of strings (OpenAI's `input`, `stop`), at least one element.
  std::vector<std::string> required_strings(std::string_view field);
  // The value must be one of `allowed`.
  std::string optional_enum(std::string_view field, std::vector<std::string_view> allowed,
                            std::string fallback);

  // Records an error for a field found wrong by the caller's own check (first one wins).
  void fail(std::string_view field, std::string_view problem);
  void fail_missing(std::string_view field);  // OpenAI's "Missing required parameter" 400

 private:
  const nlohmann::json* find(std::string_view field) const;  // nullptr when absent or null
  std::string name(std::string_view field) const { return prefix_ + std::string(field); }

  nlohmann::json owned_;
  const nlohmann::json* obj_ = &owned_;
  std::string prefix_;
  std::optional<ApiError> error_;
};

}  // namespace prism::api

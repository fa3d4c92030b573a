// configs/hf_config.cpp: safe, typed reads of a Hugging Face config.json. Every failure is a Status whose
// message names the file and the key (dotted for nested objects), since a model author reads
// it to fix a checkpoint; nlohmann's exceptions are caught at the one call that can throw.
// It must not interpret values: the family configs own their structs and validate().
#include "configs/hf_config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"

namespace prism::configs {

struct HfConfig::Impl {
  nlohmann::json value;  // an object
  std::string origin;    // the file, for messages
  std::string prefix;    // "rope_scaling." inside a nested object; "" at the top
};

namespace {

using json = nlohmann::json;

// The JSON type as a config author would read it, with the value when it is a short scalar.
std::string describe(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  if (v.is_number_integer()) return "integer " + text;
  if (v.is_number_float()) return "number " + text;
  if (v.is_string()) return "string " + text;
  return v.type_name();
}

// The value of `key`; null counts as absent, as transformers treats `"sliding_window": null`.
Result<const json*> lookup(const HfConfig::Impl& c, const std::string& key) {
  auto it = c.value.find(key);
  if (it == c.value.end() || it->is_null()) return not_found(c.origin + ": missing '" + c.prefix + key + "'");
  return &*it;
}

Status wrong_type(const HfConfig::Impl& c, const std::string& key, const char* want, const json& v) {
  return invalid_argument(c.origin + ": '" + c.prefix + key + "' must be " + want + ", got " + describe(v));
}

}  // namespace

HfConfig::HfConfig() : impl_(std::make_unique<Impl>()) {}
HfConfig::~HfConfig() = default;
HfConfig::HfConfig(const HfConfig& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
HfConfig& HfConfig::operator=(const HfConfig& o) {
  if (this != &o) impl_ = std::make_unique<Impl>(*o.impl_);
  return *this;
}
HfConfig::HfConfig(HfConfig&&) noexcept = default;
HfConfig& HfConfig::operator=(HfConfig&&) noexcept = default;

Result<HfConfig> HfConfig::load(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string path =
      fs::is_directory(dir_or_file, ec) ? (fs::path(dir_or_file) / "config.json").string() : dir_or_file;
  Result<std::string> text = read_file(path);
  if (!text) return Status(text.status().code(), text.status().message() + ": no readable config.json there");
  return parse(*text, path);
}

Result<HfConfig> HfConfig::parse(const std::string& json_text, const std::string& origin) {
  HfConfig c;
  c.impl_->origin = origin;
  try {
    c.impl_->value = json::parse(json_text);
  } catch (const json::exception& e) {
    return invalid_argument(origin + ": not valid JSON: " + e.what());
  }
  if (!c.impl_->value.is_object())
    return invalid_argument(origin + ": must be a JSON object, got " +
                            std::string(c.impl_->value.type_name()));
  return c;
}

bool HfConfig::has(const std::string& key) const {
  auto it = impl_->value.find(key);
  return it != impl_->value.end() && !it->is_null();
}

Result<int64_t> HfConfig::get_int(const std::string& key) const {
  PRISM_ASSIGN_OR_RETURN(const json* value, lookup(*impl_, key));
  const json& v = *value;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(INT64_MAX))
      return wrong_type(*impl_, key, "an integer that fits in 64 bits", v);
    return int64_t(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  // Some exporters write 4096.0 for integer fields; Python accepts it, so an integral value is taken.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return int64_t(d);
  }
  return wrong_type(*impl_, key, "an integer", v);
}

Result<double> HfConfig::get_float(const std::string& key) const {
  PRISM_ASSIGN_OR_RETURN(const json* value, lookup(*impl_, key));
  const json& v = *value;
  if (!v.is_number()) return wrong_type(*impl_, key, "a number", v);
  return v.get<double>();
}

Result<bool> HfConfig::get_bool(const std::string& key) const {
  PRISM_ASSIGN_OR_RETURN(const json* value, lookup(*impl_, key));
  const json& v = *value;
  if (!v.is_boolean()) return wrong_type(*impl_, key, "a boolean", v);
  return v.get<bool>();
}

Result<std::string> HfConfig::get_string(const std::string& key) const {
  PRISM_ASSIGN_OR_RETURN(const json* value, lookup(*impl_, key));
  const json& v = *value;
  if (!v.is_string()) return wrong_type(*impl_, key, "a string", v);
  return v.get<std::string>();
}

Result<std::vector<std::string>> HfConfig::get_strings(const std::string& key) const {
  PRISM_ASSIGN_OR_RETURN(const json* value, lookup(*impl_, key));
  const json& v = *value;
  if (!v.is_array()) return wrong_type(*impl_, key, "an array of strings", v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return invalid_argument(impl_->origin + ": '" + impl_->prefix + key + "[" + std::to_string(i) +
                              "]' must be a string, got " + describe(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

Result<std::vector<int64_t>> HfConfig::get_ints(const std::string& key) const {
  PRISM_ASSIGN_OR_RETURN(const json* value, lookup(*impl_, key));
  const json& v = *value;
  if (!v.is_array()) return wrong_type(*impl_, key, "an array of integers", v);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer())
      return invalid_argument(impl_->origin + ": '" + impl_->prefix + key + "[" + std::to_string(i) +
                              "]' must be an integer, got " + describe(v[i]));
    out.push_back(v[i].get<int64_t>());
  }
  return out;
}

Result<HfConfig> HfConfig::get_object(const std::string& key) const {
  PRISM_ASSIGN_OR_RETURN(const json* value, lookup(*impl_, key));
  const json& v = *value;
  if (!v.is_object()) return wrong_type(*impl_, key, "an object", v);
  HfConfig c;
  c.impl_->value = v;
  c.impl_->origin = impl_->origin;
  c.impl_->prefix = impl_->prefix + key + ".";
  return c;
}

Result<int64_t> HfConfig::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : Result<int64_t>(fallback);
}
Result<double> HfConfig::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : Result<double>(fallback);
}
Result<bool> HfConfig::get_bool(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : Result<bool>(fallback);
}
Result<std::string> HfConfig::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : Result<std::string>(fallback);
}

const nlohmann::json& HfConfig::object() const { return impl_->value; }
const std::string& HfConfig::origin() const { return impl_->origin; }

std::string HfConfig::dump() const {
  return impl_->value.dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace prism::configs

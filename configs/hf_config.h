// configs/hf_config.h: HF config.json, the architecture hyper-parameters of a model directory.
// The family configs of this layer turn it into typed structs with validate(); this class only
// reads JSON safely. Tensor-free: it must not include runtime/, formats/ or models/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace prism::configs {

class HfConfig {
 public:
  // dir: a model directory with config.json, or the path of a .json file.
  static Result<HfConfig> load(const std::string& dir_or_file);
  static Result<HfConfig> parse(const std::string& json_text, const std::string& origin = "config.json");

  bool has(const std::string& key) const;
  // Typed getters: a missing key or the wrong JSON type is an error naming the key and file.
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;  // accepts integers too
  Result<bool> get_bool(const std::string& key) const;
  Result<std::string> get_string(const std::string& key) const;
  Result<std::vector<std::string>> get_strings(const std::string& key) const;  // e.g. "architectures"
  Result<std::vector<int64_t>> get_ints(const std::string& key) const;          // e.g. "suppress_tokens"
  // With a default when the key is absent (null counts as absent); a wrong type is an error.
  Result<int64_t> get_int(const std::string& key, int64_t fallback) const;
  Result<double> get_float(const std::string& key, double fallback) const;
  Result<bool> get_bool(const std::string& key, bool fallback) const;
  Result<std::string> get_string(const std::string& key, const std::string& fallback) const;
  // A nested object (e.g. "rope_scaling", "text_config"); not_found when absent.
  Result<HfConfig> get_object(const std::string& key) const;
  std::string dump() const;  // the JSON text
  // The parsed object, for configs that keep a sub-object as JSON (VlmConfig) or read a key
  // of a shape the getters above do not cover.
  const nlohmann::json& object() const;
  const std::string& origin() const;  // the file, for messages

  ~HfConfig();
  HfConfig(const HfConfig&);
  HfConfig& operator=(const HfConfig&);
  HfConfig(HfConfig&&) noexcept;
  HfConfig& operator=(HfConfig&&) noexcept;
  struct Impl;

 private:
  HfConfig();
  std::unique_ptr<Impl> impl_;  // nlohmann::json, kept out of this header
};

}  // namespace prism::configs

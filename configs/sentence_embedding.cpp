// configs/sentence_embedding.cpp: reads the sentence-transformers files of a model directory.
// Only the keys that pick the pooling and normalisation are read; the Transformer module's own
// files (max_seq_length, prompts) are the frontend's.
#include "configs/sentence_embedding.h"

#include <filesystem>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file.h"

namespace prism::configs {
namespace {

using nlohmann::json;

constexpr char kTransformerType[] = "sentence_transformers.models.Transformer";
constexpr char kPoolingType[] = "sentence_transformers.models.Pooling";
constexpr char kNormalizeType[] = "sentence_transformers.models.Normalize";

// The JSON of a file; invalid_argument naming it when it is not JSON (read errors as read_file's).
Result<json> read_json(const std::string& path) {
  PRISM_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(path + ": not valid JSON");
  return j;
}

struct Module {
  std::string type;
  std::string path;  // relative to the model directory
};

// modules.json: [{"idx", "name", "path", "type"}, ...] in pipeline order.
Result<std::vector<Module>> parse_modules(const json& j, const std::string& path) {
  if (!j.is_array()) return invalid_argument(path + ": must be a JSON array of modules");
  std::vector<Module> modules;
  for (const json& m : j) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
      return invalid_argument(path + ": every module needs a string 'type', got " + m.dump());
    Module mod{m["type"].get<std::string>(), ""};
    if (m.contains("path")) {
      if (!m["path"].is_string()) return invalid_argument(path + ": module 'path' must be a string, got " + m.dump());
      mod.path = m["path"].get<std::string>();
    }
    modules.push_back(std::move(mod));
  }
  return modules;
}

// 1_Pooling/config.json: one pooling_mode_* flag set. Several set means sentence-transformers
// concatenates the poolings (a vector of several times the hidden size): not supported.
Result<Pooling> parse_pooling_config(const json& j, const std::string& path) {
  if (!j.is_object()) return invalid_argument(path + ": must be a JSON object");
  struct Mode {
    const char* key;
    std::optional<Pooling> pooling;  // nullopt: a mode Prism does not implement
  };
  static const Mode kModes[] = {
      {"pooling_mode_cls_token", Pooling::cls},      {"pooling_mode_mean_tokens", Pooling::mean},
      {"pooling_mode_lasttoken", Pooling::last_token}, {"pooling_mode_max_tokens", std::nullopt},
      {"pooling_mode_mean_sqrt_len_tokens", std::nullopt}, {"pooling_mode_weightedmean_tokens", std::nullopt},
  };
  std::vector<const Mode*> set;
  for (const Mode& mode : kModes) {
    if (!j.contains(mode.key) || j[mode.key].is_null()) continue;
    if (!j[mode.key].is_boolean())
      return invalid_argument(path + ": '" + mode.key + "' must be a boolean, got " + j[mode.key].dump());
    if (j[mode.key].get<bool>()) set.push_back(&mode);
  }
  if (set.empty()) return invalid_argument(path + ": no pooling_mode_* is true");
  if (set.size() > 1)
    return unimplemented(path + ": several pooling modes at once ('" + set[0]->key + "', '" + set[1]->key +
                         "') concatenate vectors; Prism pools one way");
  if (!set[0]->pooling)
    return unimplemented(path + ": '" + set[0]->key + "' is not supported (cls_token, mean_tokens, lasttoken)");
  return *set[0]->pooling;
}

}  // namespace

std::string_view pooling_name(Pooling p) {
  switch (p) {
    case Pooling::cls: return "cls";
    case Pooling::mean: return "mean";
    case Pooling::last_token: return "last_token";
  }
  return "unknown";
}

Result<Pooling> parse_pooling(std::string_view name) {
  for (Pooling p : {Pooling::cls, Pooling::mean, Pooling::last_token})
    if (name == pooling_name(p)) return p;
  return invalid_argument("unknown pooling '" + std::string(name) + "' (cls, mean, last_token)");
}

Result<SentenceEmbeddingConfig> read_sentence_embedding_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const std::string modules_path = (dir / "modules.json").string();
  std::error_code ec;
  if (!fs::exists(modules_path, ec)) {
    // What sentence-transformers does with a plain Hugging Face encoder: mean pooling.
    return SentenceEmbeddingConfig{Pooling::mean, false, "default (no modules.json): mean, not normalised"};
  }
  PRISM_ASSIGN_OR_RETURN(const json modules_json, read_json(modules_path));
  PRISM_ASSIGN_OR_RETURN(const std::vector<Module> modules, parse_modules(modules_json, modules_path));

  SentenceEmbeddingConfig config;
  config.source = "modules.json (no Pooling module): mean";
  bool has_pooling = false;
  for (const Module& m : modules) {
    // NOTE: any other module (Dense, LayerNorm, ...) would change the vectors: refusing it
    // is better than serving vectors the model's users would not get.
    if (m.type != kTransformerType && m.type != kPoolingType && m.type != kNormalizeType)
      return unimplemented(modules_path + ": module '" + m.type +
                           "' is not supported (Transformer, Pooling, Normalize)");
    if (m.type == kNormalizeType) config.normalize = true;
    if (m.type != kPoolingType) continue;
    if (has_pooling) return unimplemented(modules_path + ": more than one Pooling module");
    has_pooling = true;
    const std::string pooling_path = (dir / m.path / "config.json").string();
    PRISM_ASSIGN_OR_RETURN(const json pooling_json, read_json(pooling_path));
    PRISM_ASSIGN_OR_RETURN(config.pooling, parse_pooling_config(pooling_json, pooling_path));
    config.source = (fs::path(m.path) / "config.json").string();
  }
  return config;
}

}  // namespace prism::configs

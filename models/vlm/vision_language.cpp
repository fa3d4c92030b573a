// The VLM loaders: config and name layout read once, each half built by its family's loader.
#include "models/vlm/vision_language.h"

#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/file.h"

#include "formats/safetensors.h"
#include "models/llama/llama.h"
#include "models/vlm/idefics3_media_encoder.h"
#include "models/vlm/llava_media_encoder.h"
#include "models/vlm/vlm_weight_names.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

struct Opened {
  configs::VlmConfig config;
  formats::WeightSource weights;
  VlmWeightNames names;
};

Result<Opened> open_vlm(const std::string& dir) {
  PRISM_ASSIGN_OR_RETURN(configs::VlmConfig config, configs::VlmConfig::load(dir));
  PRISM_ASSIGN_OR_RETURN(formats::WeightSource weights, formats::WeightSource::open(dir));
  Result<VlmWeightNames> names = find_vlm_weight_names(weights, config);
  if (!names) return Status(names.status().code(), dir + ": " + names.status().message());
  return Opened{std::move(config), std::move(weights), std::move(names).value()};
}

// Errors about tensors come without a path: name the directory, as load_llama(dir) does.
template <typename T>
Result<T> in_dir(const std::string& dir, Result<T> result) {
  if (result) return result;
  const Status status = result.status();
  if (status.message().starts_with(dir)) return result;
  return Status(status.code(), dir + ": " + status.message());
}

}  // namespace

// NOTE: by model_type alone, so that a LLaVA checkpoint with a sub-model Prism lacks still
// comes here and gets load_vlm_*'s error naming it, not the LLM loader's "not a decoder".
bool is_vision_language_model(const std::string& dir) {
  Result<std::string> text = read_file((std::filesystem::path(dir) / "config.json").string());
  if (!text) return false;
  const nlohmann::json config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object() || !config.contains("model_type") ||
      !config["model_type"].is_string())
    return false;
  const std::string model_type = config["model_type"].get<std::string>();
  return model_type == "llava" || model_type == "idefics3";
}

Result<std::unique_ptr<Decoder>> load_vlm_language_model(const std::string& dir, ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const Opened vlm, open_vlm(dir));
  PRISM_ASSIGN_OR_RETURN(const configs::LlamaConfig text, vlm.config.text_model());
  return in_dir(dir, load_llama(vlm.weights, text, vlm.names.language_model, precision));
}

Result<std::unique_ptr<MediaEncoder>> load_vlm_media_encoder(const std::string& dir, ops::Precision precision) {
  ArenaScope no_arena(nullptr);  // weights outlive every encode's arena
  PRISM_ASSIGN_OR_RETURN(const Opened vlm, open_vlm(dir));
  switch (vlm.config.family) {
    case configs::VlmFamily::llava:
      return in_dir(dir, load_llava_media_encoder(vlm.weights, vlm.config, vlm.names, precision));
    case configs::VlmFamily::idefics3:
      return in_dir(dir, load_idefics3_media_encoder(vlm.weights, vlm.config, vlm.names, precision));
  }
  return internal_error("load_vlm_media_encoder: unknown family");
}

}  // namespace prism::models

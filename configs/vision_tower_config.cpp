// configs/vision_tower_config.cpp: VisionTowerConfig, the vision_config keys as transformers'
// CLIPVisionConfig, SiglipVisionConfig and Idefics3VisionConfig name them, with their defaults.
#include "configs/vision_tower_config.h"

#include <optional>
#include <string>

#include "configs/activation.h"

namespace prism::configs {
namespace {

// Defaults of the transformers config classes, for keys a real config.json leaves out
// (llava-hf's vision_config omits num_channels / hidden_act; SmolVLM's omits
// num_hidden_layers and intermediate_size).
struct VisionDefaults {
  int64_t hidden_size, intermediate_size, num_layers, num_heads, image_size, patch_size;
  double layer_norm_eps;
  const char* hidden_act;
};
// CLIPVisionConfig, SiglipVisionConfig, Idefics3VisionConfig (= SmolVLMVisionConfig).
constexpr VisionDefaults kClipDefaults{768, 3072, 12, 12, 224, 32, 1e-5, "quick_gelu"};
constexpr VisionDefaults kSiglipDefaults{768, 3072, 12, 12, 224, 16, 1e-6, "gelu_pytorch_tanh"};
constexpr VisionDefaults kIdefics3Defaults{1152, 3072, 12, 16, 224, 32, 1e-6, "gelu_pytorch_tanh"};

const VisionDefaults& defaults_for(const nlohmann::json& j, VisionTowerKind kind) {
  if (kind == VisionTowerKind::clip) return kClipDefaults;
  const auto it = j.find("model_type");
  if (it != j.end() && it->is_string()) {
    const std::string t = it->get<std::string>();
    if (t == "idefics3" || t == "idefics3_vision" || t == "smolvlm_vision") return kIdefics3Defaults;
  }
  return kSiglipDefaults;
}

Result<int64_t> int_key(const nlohmann::json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer())
    return invalid_argument(std::string("config.json: vision_config.") + key + " must be an integer, got " +
                            it->dump());
  const int64_t v = it->get<int64_t>();
  if (v <= 0)
    return invalid_argument(std::string("config.json: vision_config.") + key + " must be positive, got " +
                            std::to_string(v));
  return v;
}

}  // namespace

Result<VisionTowerConfig> VisionTowerConfig::from_hf(const nlohmann::json& j, VisionTowerKind kind) {
  if (!j.is_object()) return invalid_argument("config.json: vision_config must be an object");
  const VisionDefaults& d = defaults_for(j, kind);
  VisionTowerConfig c;
  c.kind = kind;
  PRISM_ASSIGN_OR_RETURN(c.hidden_size, int_key(j, "hidden_size", d.hidden_size));
  PRISM_ASSIGN_OR_RETURN(c.intermediate_size, int_key(j, "intermediate_size", d.intermediate_size));
  PRISM_ASSIGN_OR_RETURN(const int64_t layers, int_key(j, "num_hidden_layers", d.num_layers));
  PRISM_ASSIGN_OR_RETURN(const int64_t heads, int_key(j, "num_attention_heads", d.num_heads));
  PRISM_ASSIGN_OR_RETURN(c.image_size, int_key(j, "image_size", d.image_size));
  PRISM_ASSIGN_OR_RETURN(c.patch_size, int_key(j, "patch_size", d.patch_size));
  PRISM_ASSIGN_OR_RETURN(c.num_channels, int_key(j, "num_channels", 3));
  c.num_layers = int(layers);
  c.num_heads = int(heads);
  c.layer_norm_eps = d.layer_norm_eps;
  if (const auto it = j.find("layer_norm_eps"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0))
      return invalid_argument("config.json: vision_config.layer_norm_eps must be a positive number, got " + it->dump());
    c.layer_norm_eps = it->get<double>();
  }
  c.hidden_act = d.hidden_act;
  if (const auto it = j.find("hidden_act"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return invalid_argument("config.json: vision_config.hidden_act must be a string");
    c.hidden_act = it->get<std::string>();
  }
  const std::optional<Activation> act = parse_activation(c.hidden_act);
  if (!act || act == Activation::relu)
    return invalid_argument("config.json: hidden_act '" + c.hidden_act +
                            "' is not supported (quick_gelu, gelu, gelu_new, gelu_pytorch_tanh)");
  if (c.hidden_size % c.num_heads != 0)
    return invalid_argument("config.json: vision_config.hidden_size " + std::to_string(c.hidden_size) +
                            " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
  if (c.patch_size > c.image_size)
    return invalid_argument("config.json: vision_config.patch_size " + std::to_string(c.patch_size) +
                            " is larger than image_size " + std::to_string(c.image_size));
  return c;
}

}  // namespace prism::configs

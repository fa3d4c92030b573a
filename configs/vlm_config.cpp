// configs/vlm_config.cpp: VlmConfig, LlavaConfig and Idefics3Config as transformers reads them, defaults included.
#include "configs/vlm_config.h"

namespace prism::configs {
namespace {

using nlohmann::json;

// transformers' config defaults for the keys the halves read, by sub-config model_type.
// NOTE: these are the values a config.json that omits the key gets in transformers (e.g.
// llava-1.5-7b's text_config has no hidden_size: LlamaConfig's 4096 applies).
const json& text_defaults(const std::string& model_type) {
  static const json llama = {
      {"vocab_size", 32000}, {"hidden_size", 4096}, {"intermediate_size", 11008},
      {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"max_position_embeddings", 2048},
      {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
  static const json mistral = {
      {"vocab_size", 32000}, {"hidden_size", 4096}, {"intermediate_size", 14336},
      {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
      {"max_position_embeddings", 4096 * 32}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
      {"sliding_window", 4096}, {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
  static const json qwen2 = {
      {"vocab_size", 151936}, {"hidden_size", 4096}, {"intermediate_size", 22016},
      {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 32},
      {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
      {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
  static const json none = json::object();
  if (model_type == "llama") return llama;
  if (model_type == "mistral") return mistral;
  if (model_type == "qwen2") return qwen2;
  return none;
}

const json& vision_defaults(const std::string& model_type) {
  static const json clip = {
      {"hidden_size", 768}, {"intermediate_size", 3072}, {"num_hidden_layers", 12},
      {"num_attention_heads", 12}, {"num_channels", 3}, {"image_size", 224}, {"patch_size", 32},
      {"hidden_act", "quick_gelu"}, {"layer_norm_eps", 1e-5}};
  static const json siglip = {
      {"hidden_size", 768}, {"intermediate_size", 3072}, {"num_hidden_layers", 12},
      {"num_attention_heads", 12}, {"num_channels", 3}, {"image_size", 224}, {"patch_size", 16},
      {"hidden_act", "gelu_pytorch_tanh"}, {"layer_norm_eps", 1e-6}};
  static const json idefics3 = {
      {"hidden_size", 1152}, {"intermediate_size", 3072}, {"num_hidden_layers", 12},
      {"num_attention_heads", 16}, {"num_channels", 3}, {"image_size", 224}, {"patch_size", 32},
      {"hidden_act", "gelu_pytorch_tanh"}, {"layer_norm_eps", 1e-6}};
  static const json none = json::object();
  if (model_type == "clip_vision_model") return clip;
  if (model_type == "siglip_vision_model") return siglip;
  if (model_type == "idefics3_vision") return idefics3;
  return none;
}

// `given` (an object, or null when the config has none) over `defaults`: keys present in
// `given` win, null values count as absent (transformers treats them as the default).
json with_defaults(const json& defaults, const json& given) {
  json out = defaults;
  if (given.is_object())
    for (const auto& [key, value] : given.items())
      if (!value.is_null()) out[key] = value;
  return out;
}

// A sub-config object (absent or null: an empty object); invalid_argument for another type.
Result<json> sub_config(const json& config, const char* key, const std::string& origin) {
  if (!config.contains(key) || config[key].is_null()) return json::object();
  if (!config[key].is_object()) return invalid_argument(origin + ": " + key + " must be an object");
  return config[key];
}

bool has_key(const json& config, const char* key) { return config.contains(key) && !config[key].is_null(); }

Result<std::string> string_key(const json& config, const char* key, const std::string& fallback,
                               const std::string& origin) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_string()) return invalid_argument(origin + ": " + key + " must be a string");
  return config[key].get<std::string>();
}

Result<int64_t> int_key(const json& config, const char* key, int64_t fallback, const std::string& origin) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_number_integer()) return invalid_argument(origin + ": " + key + " must be an integer");
  return config[key].get<int64_t>();
}

Result<bool> bool_key(const json& config, const char* key, bool fallback, const std::string& origin) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_boolean()) return invalid_argument(origin + ": " + key + " must be true or false");
  return config[key].get<bool>();
}

// text_config with its model_type (default "llama", as both families' configs do) and HF
// defaults. NOTE: "architectures" is dropped: SmolVLM's text_config names its training
// class ("VLlama3ForCausalLM"), which says nothing about the graph LlamaConfig checks.
Result<json> text_config_of(const json& config, VlmFamily family, const std::string& origin) {
  PRISM_ASSIGN_OR_RETURN(json text, sub_config(config, "text_config", origin));
  const bool absent = text.empty();
  PRISM_ASSIGN_OR_RETURN(const std::string model_type, string_key(text, "model_type", "llama", origin + " text_config"));
  const json& defaults = text_defaults(model_type);
  if (defaults.empty())
    return unimplemented(origin + ": text_config model_type '" + model_type +
                         "' is not a language model Prism runs in a VLM (llama, mistral, qwen2)");
  json out = with_defaults(defaults, text);
  out["model_type"] = model_type;
  out.erase("architectures");
  // NOTE: Idefics3Config without a text_config builds LlamaConfig(rms_norm_eps=1e-5).
  if (absent && family == VlmFamily::idefics3) out["rms_norm_eps"] = 1e-5;
  return out;
}

Result<json> vision_config_of(const json& config, VlmFamily family, const std::string& origin,
                              VisionTowerKind& kind) {
  PRISM_ASSIGN_OR_RETURN(const json vision, sub_config(config, "vision_config", origin));
  if (family == VlmFamily::idefics3) {
    // NOTE: Idefics3Config builds Idefics3VisionConfig(**vision_config) whatever model_type
    // the dict names (SmolVLM configs written by transformers 4.46 say "idefics3").
    kind = VisionTowerKind::siglip;
    json out = with_defaults(vision_defaults("idefics3_vision"), vision);
    out["model_type"] = "idefics3_vision";
    return out;
  }
  PRISM_ASSIGN_OR_RETURN(const std::string model_type,
                         string_key(vision, "model_type", "clip_vision_model", origin + " vision_config"));
  if (model_type != "clip_vision_model" && model_type != "siglip_vision_model")
    return unimplemented(origin + ": vision_config model_type '" + model_type +
                         "' is not a vision tower Prism runs in LLaVA (clip_vision_model, siglip_vision_model)");
  kind = model_type == "clip_vision_model" ? VisionTowerKind::clip : VisionTowerKind::siglip;
  // NOTE: LlavaConfig without a vision_config builds CLIP ViT-L/14 at 336 (llava-1.5's).
  const json absent = {{"intermediate_size", 4096}, {"hidden_size", 1024}, {"patch_size", 14},
                       {"image_size", 336}, {"num_hidden_layers", 24}, {"num_attention_heads", 16}};
  json out = with_defaults(vision_defaults(model_type), vision.empty() ? absent : vision);
  out["model_type"] = model_type;
  return out;
}

Status read_llava_keys(const json& config, VlmConfig& c) {
  const std::string& origin = c.origin;
  // NOTE: LlavaConfig maps image_token_id to image_token_index; configs carry either.
  PRISM_ASSIGN_OR_RETURN(const int64_t index, int_key(config, "image_token_index", 32000, origin));
  PRISM_ASSIGN_OR_RETURN(c.image_token_id, int_key(config, "image_token_id", index, origin));
  c.image_token_key = has_key(config, "image_token_id")      ? "image_token_id"
                      : has_key(config, "image_token_index") ? "image_token_index"
                                                             : "";
  PRISM_ASSIGN_OR_RETURN(c.projector_hidden_act, string_key(config, "projector_hidden_act", "gelu", origin));
  PRISM_ASSIGN_OR_RETURN(c.vision_feature_select_strategy,
                         string_key(config, "vision_feature_select_strategy", "default", origin));
  if (c.vision_feature_select_strategy != "default" && c.vision_feature_select_strategy != "full")
    return invalid_argument(origin + ": vision_feature_select_strategy '" + c.vision_feature_select_strategy +
                            "' is not 'default' or 'full'");
  if (config.contains("vision_feature_layer") && config["vision_feature_layer"].is_array())
    return unimplemented(origin + ": vision_feature_layer as a list of layers (features concatenated) is not supported");
  PRISM_ASSIGN_OR_RETURN(const int64_t layer, int_key(config, "vision_feature_layer", -2, origin));
  c.vision_feature_layer = int(layer);
  PRISM_ASSIGN_OR_RETURN(c.multimodal_projector_bias, bool_key(config, "multimodal_projector_bias", true, origin));
  return Status();
}

}  // namespace

Result<VlmConfig> VlmConfig::load(const std::string& dir) {
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::load(dir));
  return from_hf(hf);
}

Result<VlmConfig> VlmConfig::from_hf(const HfConfig& hf) {
  VlmConfig c;
  c.origin = hf.origin();
  const json& config = hf.object();
  PRISM_ASSIGN_OR_RETURN(const std::string model_type, string_key(config, "model_type", "", c.origin));
  if (model_type == "llava") {
    c.family = VlmFamily::llava;
  } else if (model_type == "idefics3") {
    c.family = VlmFamily::idefics3;
  } else {
    return unimplemented(c.origin + ": model_type '" + model_type +
                         "' is not a vision-language family Prism runs (llava, idefics3)");
  }
  PRISM_ASSIGN_OR_RETURN(c.text_config, text_config_of(config, c.family, c.origin));
  PRISM_ASSIGN_OR_RETURN(c.vision_config, vision_config_of(config, c.family, c.origin, c.tower_kind));
  PRISM_ASSIGN_OR_RETURN(const bool tied, bool_key(config, "tie_word_embeddings", false, c.origin));
  PRISM_ASSIGN_OR_RETURN(const bool text_tied,
                         bool_key(c.text_config, "tie_word_embeddings", false, c.origin + " text_config"));
  c.tie_word_embeddings = tied || text_tied;
  c.text_config["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.family == VlmFamily::llava) {
    PRISM_RETURN_IF_ERROR(read_llava_keys(config, c));
  } else {
    PRISM_ASSIGN_OR_RETURN(c.image_token_id, int_key(config, "image_token_id", 128257, c.origin));
    if (has_key(config, "image_token_id")) c.image_token_key = "image_token_id";
    PRISM_ASSIGN_OR_RETURN(c.scale_factor, int_key(config, "scale_factor", 2, c.origin));
    if (c.scale_factor <= 0)
      return invalid_argument(c.origin + ": scale_factor must be positive, got " + std::to_string(c.scale_factor));
  }
  if (c.image_token_id < 0)
    return invalid_argument(c.origin + ": the image token id must not be negative, got " + std::to_string(c.image_token_id));
  return c;
}

Result<LlamaConfig> VlmConfig::text_model() const {
  const std::string where = origin + " text_config";
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::parse(text_config.dump(), where));
  return LlamaConfig::from_hf(hf, where);
}

Result<VisionTowerConfig> VlmConfig::vision_tower() const {
  Result<VisionTowerConfig> tower = VisionTowerConfig::from_hf(vision_config, tower_kind);
  if (!tower) return Status(tower.status().code(), origin + " vision_config: " + tower.status().message());
  return tower;
}

}  // namespace prism::configs

// configs/vlm_config.h: a vision-language checkpoint's config.json (LlavaConfig,
// Idefics3Config), read once for both halves and for the vision frontend. Real configs omit
// keys that have transformers defaults (llava-1.5-7b's text_config lists six keys; its
// vision_config has no hidden_act), so the sub-configs come back with those defaults filled
// in, ready for LlamaConfig::from_hf and VisionTowerConfig::from_hf. No weights here: the
// parameter-name layout is models/vlm/vlm_weight_names.h.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "configs/hf_config.h"
#include "configs/llama_config.h"
#include "configs/vision_tower_config.h"

namespace prism::configs {

enum class VlmFamily : uint8_t {
  llava,     // LlavaForConditionalGeneration
  idefics3,  // Idefics3ForConditionalGeneration (SmolVLM)
};

struct VlmConfig {
  VlmFamily family = VlmFamily::llava;
  std::string origin;        // "<dir>/config.json", for messages
  nlohmann::json text_config;    // model_type llama / mistral / qwen2, HF defaults applied
  nlohmann::json vision_config;  // the tower's keys, HF defaults applied
  VisionTowerKind tower_kind = VisionTowerKind::clip;
  bool tie_word_embeddings = false;  // top-level or text_config's (either ties)
  int64_t image_token_id = 0;        // llava: image_token_index
  // The key image_token_id came from ("image_token_id", "image_token_index"); "" when neither
  // is in config.json (the family's default applies).
  std::string image_token_key;

  // LLaVA: the tower's hidden_states index whose rows are projected (negative counts from
  // the end, as Python indexing), whether the class token is dropped ("default") or kept
  // ("full"), and the projector's activation and biases.
  int vision_feature_layer = -2;
  std::string vision_feature_select_strategy = "default";
  std::string projector_hidden_act = "gelu";
  bool multimodal_projector_bias = true;
  // Idefics3: the connector's pixel-shuffle factor (rows per view = (grid / s)²).
  int64_t scale_factor = 2;

  // A parsed config.json (its origin names the file in messages). unimplemented for a
  // model_type that is not a family above, a text or vision model_type Prism does not run, or
  // a list of vision_feature_layer; invalid_argument naming a key of the wrong type or value.
  static Result<VlmConfig> from_hf(const HfConfig& hf);
  // <dir>/config.json: not_found without it, else as from_hf.
  static Result<VlmConfig> load(const std::string& dir);

  // The typed sub-configs; their errors name "<origin> text_config" / "vision_config".
  Result<LlamaConfig> text_model() const;
  Result<VisionTowerConfig> vision_tower() const;
};

}  // namespace prism::configs

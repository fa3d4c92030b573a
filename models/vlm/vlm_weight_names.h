// models/vlm/vlm_weight_names.h: where a vision-language checkpoint keeps each half's
// tensors (the config itself is configs/vlm_config.h).
#pragma once

#include <string>

#include "base/status.h"
#include "configs/vlm_config.h"
#include "formats/safetensors.h"
#include "models/llama/llama.h"

namespace prism::models {

// Where each half's tensors are. LLaVA checkpoints exist in two layouts: transformers < 4.52
// ("vision_tower.vision_model.*", "multi_modal_projector.*", "language_model.model.*",
// "language_model.lm_head.weight") and ≥ 4.52 ("model.vision_tower.vision_model.*",
// "model.multi_modal_projector.*", "model.language_model.*", "lm_head.weight"). Idefics3 has
// one: "model.vision_model.*", "model.connector.*", "model.text_model.*", "lm_head.weight".
struct VlmWeightNames {
  std::string vision_tower;   // the VisionTower prefix, e.g. "vision_tower.vision_model."
  std::string projector;      // "multi_modal_projector." / "model.connector.modality_projection."
  LlamaWeightNames language_model;
};

// The layout the checkpoint holds, told by its embedding table's name; not_found naming the
// names looked for when neither is there.
Result<VlmWeightNames> find_vlm_weight_names(const formats::WeightSource& weights, const configs::VlmConfig& config);

}  // namespace prism::models

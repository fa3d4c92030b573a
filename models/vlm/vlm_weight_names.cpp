// models/vlm/vlm_weight_names.cpp: the tensor-name layouts of LLaVA and Idefics3 checkpoints.
#include "models/vlm/vlm_weight_names.h"

namespace prism::models {

Result<VlmWeightNames> find_vlm_weight_names(const formats::WeightSource& weights, const configs::VlmConfig& config) {
  VlmWeightNames names;
  if (config.family == configs::VlmFamily::idefics3) {
    names.vision_tower = "model.vision_model.";
    names.projector = "model.connector.modality_projection.";
    names.language_model = {"model.text_model.", "lm_head.weight"};
    return names;
  }
  constexpr char kOldEmbed[] = "language_model.model.embed_tokens.weight";
  constexpr char kNewEmbed[] = "model.language_model.embed_tokens.weight";
  if (weights.contains(kOldEmbed)) {
    names.vision_tower = "vision_tower.vision_model.";
    names.projector = "multi_modal_projector.";
    names.language_model = {"language_model.model.", "language_model.lm_head.weight"};
  } else if (weights.contains(kNewEmbed)) {
    names.vision_tower = "model.vision_tower.vision_model.";
    names.projector = "model.multi_modal_projector.";
    names.language_model = {"model.language_model.", "lm_head.weight"};
  } else {
    return not_found(std::string("LLaVA checkpoint without a language model: neither ") + kOldEmbed +
                     " (transformers < 4.52) nor " + kNewEmbed + " (>= 4.52)");
  }
  return names;
}

}  // namespace prism::models

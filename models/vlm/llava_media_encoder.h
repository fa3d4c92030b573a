// models/vlm/llava_media_encoder.h: LLaVA's vision half (LlavaModel.get_image_features): the
// tower's hidden_states[vision_feature_layer], the class token dropped ("default") or kept
// ("full"), then multi_modal_projector: linear_1 → projector_hidden_act → linear_2.
#pragma once

#include <memory>

#include "base/status.h"
#include "formats/safetensors.h"
#include "models/media_encoder.h"
#include "models/vlm/vlm_weight_names.h"
#include "runtime/ops.h"

namespace prism::models {

// Loads only the tower layers the feature layer needs (llava-1.5: 23 of 24). invalid_argument
// for a vision_feature_layer outside the tower (naming it and the valid range);
// unimplemented for a selection whose rows per view are not a square grid ("full" on a CLIP
// tower: 577) or a projector activation Prism lacks; the tower's and the projector's missing
// or misshapen tensors as VisionTower::load and WeightSource::get name them.
Result<std::unique_ptr<MediaEncoder>> load_llava_media_encoder(const formats::WeightSource& weights,
                                                               const configs::VlmConfig& config, const VlmWeightNames& names,
                                                               ops::Precision precision);

}  // namespace prism::models

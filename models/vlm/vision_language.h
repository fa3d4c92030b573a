// models/vlm/vision_language.h: the vision-language families Prism serves, loaded from their
// Hugging Face directories into the two halves the generate engine drives: the language
// model (a Decoder, shared with the LLM families) and the media encoder (tower + projector).
//  - LLaVA-1.5 (model_type "llava", llava-hf layout): CLIP tower, features of
//    vision_feature_layer with the class token dropped (vision_feature_select_strategy
//    "default"), multi_modal_projector.linear_1 → GELU → linear_2, Llama LM.
//  - Idefics3 / SmolVLM (model_type "idefics3"): SigLIP tower (post-layernorm applied),
//    pixel shuffle by scale_factor, connector.modality_projection.proj, Llama-family LM.
// Both the older ("language_model.model.*", "vision_tower.*") and the transformers ≥ 4.52
// ("model.language_model.*", "model.vision_tower.*") parameter names are read.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "models/decoder.h"
#include "models/media_encoder.h"
#include "runtime/ops.h"

namespace prism::models {

// True when <dir>/config.json's model_type is one of the families above.
bool is_vision_language_model(const std::string& dir);

Result<std::unique_ptr<Decoder>> load_vlm_language_model(const std::string& dir, ops::Precision precision);
Result<std::unique_ptr<MediaEncoder>> load_vlm_media_encoder(const std::string& dir, ops::Precision precision);

}  // namespace prism::models

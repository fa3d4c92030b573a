// models/vlm/projector_weights.h: loading the nn.Linear layers that join a vision tower to a
// language model (LLaVA's multi_modal_projector, Idefics3's modality_projection).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "formats/safetensors.h"
#include "runtime/ops.h"

namespace prism::models {

// "<base>.weight" [out, in] (and "<base>.bias" [out] when with_bias) packed at `precision`;
// bf16 / f16 weights are packed from their own dtype, not widened first. not_found /
// invalid_argument naming a missing / misshapen tensor.
Result<ops::LinearWeight> load_projector_linear(const formats::WeightSource& weights, const std::string& base,
                                                int64_t out, int64_t in, bool with_bias, ops::Precision precision);

}  // namespace prism::models

// models/vlm/idefics3_media_encoder.h: Idefics3's (SmolVLM's) vision half
// (Idefics3Model.get_image_features): the SigLIP tower's last hidden state after its
// post_layernorm, pixel shuffle by scale_factor, connector.modality_projection.proj (no bias).
#pragma once

#include <memory>

#include "base/status.h"
#include "formats/safetensors.h"
#include "models/media_encoder.h"
#include "models/vlm/vlm_weight_names.h"
#include "runtime/ops.h"

namespace prism::models {

// NOTE: views are full image_size squares (the processor resizes and tiles to that size), so
// every patch is real and HF's patch_attention_mask is all ones. Its position ids are then
// bucketize(arange(0, 1 - 1e-6, 1/n), arange(1/n, 1, 1/n)) over a side of n patches, which
// is 0 .. n - 1 (what the tower uses) for SmolVLM's n = 32 and Idefics3-8B's 26, but not for
// every n: float32 rounding of the boundaries shifts some buckets when n is e.g. 19, 23 or 27
// (torch 1.13 on x86), and such a checkpoint would not match HF exactly. invalid_argument
// when scale_factor does not divide the patch grid; missing / misshapen tensors named.
Result<std::unique_ptr<MediaEncoder>> load_idefics3_media_encoder(const formats::WeightSource& weights,
                                                                  const configs::VlmConfig& config, const VlmWeightNames& names,
                                                                  ops::Precision precision);

}  // namespace prism::models

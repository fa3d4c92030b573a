// models/whisper/whisper_weights.h: what both Whisper halves load the same way: the
// checkpoint's prefix ("model." in WhisperForConditionalGeneration, none in a bare
// WhisperModel) and attention projections (k_proj without a bias) stacked into one packed
// linear. Embedding tables, byte counts and the error prefix come from
// models/common/weight_loading.h, LayerNorms from models/common/transformer_layer.h. No
// forward pass here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/safetensors.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models::whisper {

// "model." when the checkpoint has "model.<probe>", "" when it has "<probe>" alone (a bare
// WhisperModel); "model." otherwise, so the missing-tensor error names the usual name.
std::string checkpoint_prefix(const formats::WeightSource& src, const std::string& probe);

// nn.Linears "<base_i>.weight" [out_i, in] stacked along out into one packed linear, with
// their biases "<base_i>.bias" [out_i]; a bias a piece lacks is zero when bias_optional[i]
// (Whisper's k_proj), a not_found error otherwise. Pieces stored bf16 / f16 are stacked in
// that dtype (a large-v3 checkpoint is f16: no f32 copy of it at load).
struct LinearPieces {
  std::vector<std::string> bases;
  std::vector<int64_t> outs;
  std::vector<bool> bias_optional;  // empty: every bias required
};
Result<ops::LinearWeight> load_stacked_linear(const formats::WeightSource& src, const LinearPieces& pieces,
                                              int64_t in, ops::Precision precision);
// One nn.Linear with its bias.
Result<ops::LinearWeight> load_linear(const formats::WeightSource& src, const std::string& base, int64_t out,
                                      int64_t in, ops::Precision precision);
// A layer's "<layer>self_attn.{q,k,v}_proj" stacked into one [3 d, d] linear (k_proj has no
// bias: zero), as both the encoder's and the decoder's layers store them.
Result<ops::LinearWeight> load_self_attn_qkv(const formats::WeightSource& src, const std::string& layer, int64_t d,
                                             ops::Precision precision);

}  // namespace prism::models::whisper

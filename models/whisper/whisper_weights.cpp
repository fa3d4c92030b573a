// models/whisper/whisper_weights.cpp: loading what both Whisper halves share.
#include "models/whisper/whisper_weights.h"

#include <string>
#include <vector>

#include "models/common/weight_loading.h"
#include "runtime/arena.h"

namespace prism::models::whisper {

using formats::WeightSource;

std::string checkpoint_prefix(const WeightSource& src, const std::string& probe) {
  if (!src.contains("model." + probe) && src.contains(probe)) return "";
  return "model.";
}

Result<ops::LinearWeight> load_stacked_linear(const WeightSource& src, const LinearPieces& pieces, int64_t in,
                                              ops::Precision precision) {
  PRISM_CHECK(!pieces.bases.empty() && pieces.bases.size() == pieces.outs.size());
  PRISM_CHECK(pieces.bias_optional.empty() || pieces.bias_optional.size() == pieces.bases.size());
  int64_t total = 0;
  for (int64_t o : pieces.outs) total += o;
  const size_t n = pieces.bases.size();
  const DType dt = common::stored_float_dtype(src, pieces.bases[0] + ".weight");
  // NOTE: the stacked copies outlive every forward's arena.
  ArenaScope heap(nullptr);
  Tensor weight = n == 1 ? Tensor() : Tensor::empty({total, in}, dt);
  Tensor bias = Tensor::zeros({total}, DType::f32);
  int64_t row = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string& base = pieces.bases[i];
    const int64_t out = pieces.outs[i];
    PRISM_ASSIGN_OR_RETURN(const Tensor w, src.get(base + ".weight", {out, in}, dt));
    if (n == 1) weight = w;
    else weight.slice(0, row, row + out).copy_from(w);
    const bool optional = !pieces.bias_optional.empty() && pieces.bias_optional[i];
    if (!optional || src.contains(base + ".bias")) {
      PRISM_ASSIGN_OR_RETURN(const Tensor b, src.get(base + ".bias", {out}, DType::f32));
      bias.slice(0, row, row + out).copy_from(b);
    }
    row += out;
  }
  return ops::pack_linear(weight, bias, precision);
}

Result<ops::LinearWeight> load_linear(const WeightSource& src, const std::string& base, int64_t out, int64_t in,
                                      ops::Precision precision) {
  return load_stacked_linear(src, LinearPieces{{base}, {out}, {}}, in, precision);
}

Result<ops::LinearWeight> load_self_attn_qkv(const WeightSource& src, const std::string& layer, int64_t d,
                                             ops::Precision precision) {
  const std::string a = layer + "self_attn.";
  return load_stacked_linear(
      src, LinearPieces{{a + "q_proj", a + "k_proj", a + "v_proj"}, {d, d, d}, {false, true, false}}, d, precision);
}

}  // namespace prism::models::whisper

// models/whisper/whisper_weights.cpp: loading what both Whisper halves share.
#include "models/whisper/whisper_weights.h"

#include <string>
#include <vector>

#include "runtime/arena.h"

namespace prism::models::whisper {

using formats::WeightSource;

std::string checkpoint_prefix(const WeightSource& src, const std::string& probe) {
  if (!src.contains("model." + probe) && src.contains(probe)) return "";
  return "model.";
}

namespace {

// The dtype to stack pieces in: the checkpoint's when it is a float type GEMMs take.
DType stack_dtype(const WeightSource& src, const std::string& name) {
  Result<Tensor> t = src.get(name);
  if (t && (t->dtype() == DType::bf16 || t->dtype() == DType::f16)) return t->dtype();
  return DType::f32;
}

}  // namespace

Result<ops::LinearWeight> load_stacked_linear(const WeightSource& src, const LinearPieces& pieces, int64_t in,
                                              ops::Precision precision) {
  PRISM_CHECK(!pieces.bases.empty() && pieces.bases.size() == pieces.outs.size());
  PRISM_CHECK(pieces.bias_optional.empty() || pieces.bias_optional.size() == pieces.bases.size());
  int64_t total = 0;
  for (int64_t o : pieces.outs) total += o;
  const size_t n = pieces.bases.size();
  const DType dt = stack_dtype(src, pieces.bases[0] + ".weight");
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

Result<Tensor> load_table(const WeightSource& src, const std::string& name, const Dims& shape) {
  PRISM_ASSIGN_OR_RETURN(const Tensor stored, src.get(name));
  const DType dt = stored.dtype() == DType::bf16 || stored.dtype() == DType::f16 ? stored.dtype() : DType::f32;
  PRISM_ASSIGN_OR_RETURN(const Tensor t, src.get(name, shape, dt));
  ArenaScope heap(nullptr);
  // NOTE: a copy, so the model keeps no view of the mmap'd checkpoint alive.
  return t.clone();
}

int64_t linear_bytes(const ops::LinearWeight& w) {
  const int64_t elem = w.precision == ops::Precision::f32 ? 4 : w.precision == ops::Precision::bf16 ? 2 : 1;
  int64_t bytes = w.in_features * w.out_features * elem;
  if (w.precision == ops::Precision::int8) bytes += w.out_features * 4;  // per-channel scales
  if (w.has_bias) bytes += w.out_features * 4;
  return bytes;
}

Status in_dir(const std::string& dir, const Status& s) { return Status(s.code(), dir + ": " + s.message()); }

}  // namespace prism::models::whisper

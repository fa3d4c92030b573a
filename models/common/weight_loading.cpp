// models/common/weight_loading.cpp: checkpoint reads several families share
// (models/common/weight_loading.h).
#include "models/common/weight_loading.h"

#include <string>
#include <vector>

#include "runtime/arena.h"

namespace prism::models::common {

using formats::WeightSource;

DType stored_float_dtype(const WeightSource& src, const std::string& name) {
  Result<Tensor> t = src.get(name);
  if (t && (t->dtype() == DType::bf16 || t->dtype() == DType::f16)) return t->dtype();
  return DType::f32;
}

Result<Tensor> load_f32(const WeightSource& src, const std::string& name, const Dims& shape) {
  PRISM_ASSIGN_OR_RETURN(const Tensor t, src.get(name, shape, DType::f32));
  return t.clone();  // a copy, not a view of the mapping (the header's NOTE)
}

Result<Tensor> load_table(const WeightSource& src, const std::string& name, const Dims& shape) {
  PRISM_ASSIGN_OR_RETURN(const Tensor t, src.get(name, shape, stored_float_dtype(src, name)));
  ArenaScope heap(nullptr);
  return t.clone();  // a copy, not a view of the mapping (the header's NOTE)
}

Result<ops::LinearWeight> load_linear(const WeightSource& src, const std::vector<std::string>& bases,
                                      const std::vector<int64_t>& outs, int64_t in, bool with_bias,
                                      ops::Precision precision, DType dtype) {
  int64_t total = 0;
  for (int64_t o : outs) total += o;
  Tensor weight = bases.size() == 1 ? Tensor() : Tensor::empty({total, in}, dtype);
  Tensor bias = with_bias ? Tensor::empty({total}, DType::f32) : Tensor();
  int64_t row = 0;
  for (size_t i = 0; i < bases.size(); ++i) {
    PRISM_ASSIGN_OR_RETURN(const Tensor w, src.get(bases[i] + ".weight", {outs[i], in}, dtype));
    if (bases.size() == 1) weight = w;
    else weight.slice(0, row, row + outs[i]).copy_from(w);
    if (with_bias) {
      PRISM_ASSIGN_OR_RETURN(const Tensor b, src.get(bases[i] + ".bias", {outs[i]}, DType::f32));
      bias.slice(0, row, row + outs[i]).copy_from(b);
    }
    row += outs[i];
  }
  return ops::pack_linear(weight, bias, precision);
}

int64_t linear_bytes(const ops::LinearWeight& w) {
  const int64_t elem = w.precision == ops::Precision::f32 ? 4 : w.precision == ops::Precision::bf16 ? 2 : 1;
  int64_t bytes = w.in_features * w.out_features * elem;
  if (w.precision == ops::Precision::int8) bytes += w.out_features * 4;  // per-channel scales
  if (w.has_bias) bytes += w.out_features * 4;
  return bytes;
}

Status in_dir(const std::string& dir, const Status& s) { return Status(s.code(), dir + ": " + s.message()); }

}  // namespace prism::models::common

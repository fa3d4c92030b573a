// PackedLinear: one nn.Linear's weights in oneDNN's GEMM layout plus its primitive cache.
// Internal to runtime/cpu/ (includes dnnl.hpp); models see only ops::LinearWeight.
// Immutable after pack_linear except the primitive cache, which a mutex guards.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include <dnnl.hpp>

#include "runtime/cpu/linear_small_m.h"
#include "runtime/ops.h"

namespace prism::ops {

class PackedLinear {
 public:
  // weight: [out, in] f32/bf16/f16; bias: [out] or undefined. Shapes already validated.
  static Result<std::shared_ptr<PackedLinear>> create(const Tensor& weight, const Tensor& bias,
                                                      Precision precision);

  // y[rows, out] = act(x[rows, in] (row stride ld) @ W^T + b). Any thread. bf16 with rows <=
  // cpu::kSmallMMaxRows takes the small-M kernel (linear_small_m.h), the rest oneDNN.
  void run(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  // The same through oneDNN only, or the small-M kernel only (rows <= 16; needs
  // has_small_m()): for tests and benches that compare the two on one weight.
  void run_onednn(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  void run_small_m(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  bool has_small_m() const { return small_m_.has_value(); }

  // The primitive for this shape; built once and cached. For tests and benches too.
  dnnl::matmul primitive(int64_t rows, int64_t ld, Activation act) const;

  const dnnl::memory::desc& weights_desc() const { return weights_md_; }

 private:
  PackedLinear(Precision precision, int64_t in_features, int64_t out_features);
  dnnl::memory::data_type src_dt() const;
  dnnl::memory::data_type weight_dt() const;
  dnnl::primitive_attr make_attr(Activation act) const;
  dnnl::matmul::primitive_desc make_pd(int64_t rows, int64_t ld, Activation act,
                                       const dnnl::memory::desc& weights) const;

  Precision precision_;
  int64_t in_ = 0, out_ = 0;
  bool has_bias_ = false;
  dnnl::memory::desc weights_md_;     // the packed (blocked) layout
  dnnl::memory weights_;              // [in, out] in weights_md_; owned
  Tensor bias_;                       // [out] f32, heap; undefined without bias
  std::vector<float> weight_scales_;  // [out]: int8 only, max|w[n, :]| / 127
  std::optional<cpu::Bf16PanelWeights> small_m_;  // bf16 only: a view of weights_

  mutable std::mutex mu_;  // guards cache_ only; never held while executing
  mutable std::map<std::tuple<int64_t, int64_t, uint8_t>, dnnl::matmul> cache_;
};

}  // namespace prism::ops

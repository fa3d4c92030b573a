// PackedLinear: one nn.Linear's weights, packed at load for the path that runs them on the
// active instruction-set tier (the NOTE table at the top of linear.cpp), plus oneDNN's
// primitive cache where the path is oneDNN's. Internal to runtime/cpu/ (includes dnnl.hpp);
// models see only ops::LinearWeight. Immutable after pack_linear except the primitive cache,
// which a mutex guards.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include <dnnl.hpp>

#include "runtime/cpu/linear_int8.h"
#include "runtime/cpu/linear_kernels.h"
#include "runtime/ops.h"

namespace prism::ops {

// How a PackedLinear computes, fixed at pack time (linear.cpp's NOTE table says which tier
// and precision take which).
enum class LinearPath : uint8_t {
  onednn,         // oneDNN matmul for every M
  onednn_dpbf16,  // bf16: oneDNN brgemm, and the dpbf16 kernel (kernels/linear_bf16_dot.cpp)
                  // on the same packed weights for rows <= cpu::kSmallMMaxRows; AVX512_BF16 only
  bf16_widen,     // bf16: weights in Prism's panel layout, widened to f32 in the kernel
                  // (kernels/linear_bf16_widen.cpp), every M
  bf16_widen_onednn,  // bf16: the same panels; the widen kernel below kWidenedOnednnMinRows
                      // rows, above it the panels widened to f32 block by block for
                      // oneDNN's f32 matmul (prefill)
  int8_prism,     // int8 without VNNI: Prism's int8 kernel (linear_int8.h), activations
                  // quantised here
};
std::string_view linear_path_name(LinearPath path);

// Rows from which bf16_widen_onednn leaves the widen kernel for oneDNN (linear.cpp, NOTE
// (bf16 without native bf16)).
constexpr int64_t kWidenedOnednnMinRows = 1024;  // "onednn", "onednn_dpbf16", ...

class PackedLinear {
 public:
  // weight: [out, in] f32/bf16/f16; bias: [out] or undefined. Shapes already validated.
  // The path is default_path(precision).
  static Result<std::shared_ptr<PackedLinear>> create(const Tensor& weight, const Tensor& bias,
                                                      Precision precision);
  // The same on a given path, for tests and benches that compare paths on one weight: an
  // error when the path cannot run the precision, or the tier (or oneDNN on it) lacks it.
  static Result<std::shared_ptr<PackedLinear>> create(const Tensor& weight, const Tensor& bias,
                                                      Precision precision, LinearPath path);
  // The path pack_linear takes for a precision on the active tier.
  static LinearPath default_path(Precision precision);

  // y[rows, out] = act(x[rows, in] (row stride ld) @ W^T + b). Any thread.
  void run(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  LinearPath path() const { return path_; }

  // For tests and benches that compare the two halves of onednn_dpbf16 on one weight:
  // oneDNN only (the oneDNN paths), or the dpbf16 kernel only (rows <= cpu::kBf16DotMaxRows;
  // needs has_small_m(): the path, and oneDNN chose the layout the kernel knows).
  void run_onednn(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  void run_small_m(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  bool has_small_m() const { return small_m_.has_value(); }

  // The oneDNN primitive for this shape (oneDNN paths only); built once and cached.
  dnnl::matmul primitive(int64_t rows, int64_t ld, Activation act) const;
  const dnnl::memory::desc& weights_desc() const { return weights_md_; }

 private:
  PackedLinear(Precision precision, LinearPath path, int64_t in_features, int64_t out_features);
  bool uses_onednn() const { return path_ == LinearPath::onednn || path_ == LinearPath::onednn_dpbf16; }
  const float* bias_ptr() const { return has_bias_ ? bias_.data<float>() : nullptr; }
  Status pack_onednn(const Tensor& weight);
  void run_int8_prism(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  void run_widened_onednn(const float* x, int64_t rows, int64_t ld, Activation act, float* y) const;
  using PrimitiveKey = std::tuple<int64_t, int64_t, uint8_t, int64_t>;  // rows, ld, act, columns
  dnnl::matmul cached_primitive(const PrimitiveKey& key,
                                const std::function<dnnl::matmul::primitive_desc()>& make) const;
  dnnl::memory::data_type src_dt() const;
  dnnl::memory::data_type weight_dt() const;
  dnnl::primitive_attr make_attr(Activation act) const;
  dnnl::matmul::primitive_desc make_pd(int64_t rows, int64_t ld, Activation act,
                                       const dnnl::memory::desc& weights) const;

  Precision precision_;
  LinearPath path_;
  int64_t in_ = 0, out_ = 0;
  bool has_bias_ = false;
  Tensor bias_;                       // [out] f32, heap; undefined without bias
  std::vector<float> weight_scales_;  // [out]: int8 only, max|w[n, :]| / 127

  // onednn, onednn_dpbf16
  dnnl::memory::desc weights_md_;                 // the packed (blocked) layout
  dnnl::memory weights_;                          // [in, out] in weights_md_; owned
  std::optional<cpu::Bf16PanelWeights> small_m_;  // onednn_dpbf16: a view of weights_
  // bf16_widen, bf16_widen_onednn
  cpu::Bf16WidenWeights widen_;
  // int8_prism
  cpu::Int8Weights int8_;

  mutable std::mutex mu_;  // guards cache_ only; never held while executing
  mutable std::map<PrimitiveKey, dnnl::matmul> cache_;
};

}  // namespace prism::ops

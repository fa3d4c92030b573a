// GELU (erf and tanh forms), quick GELU, SiLU and SwiGLU: pointwise maps over flat f32 memory
// by the tier's vector kernel (runtime/cpu/kernels/pointwise.cpp: 8 or 16 lanes and a masked
// tail), blocks of the flat range spread over the OpenMP pool.
// NOTE: every form is written as x * (something in [0, 1]) computed with relative accuracy
// on both tails (Phi via erfc, sigmoid via exp(-x)), so large negative inputs give tiny
// results accurate to a few ulp rather than the cancellation noise of 1 + erf(x).
#include <algorithm>

#include "runtime/cpu/pointwise_kernels.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

constexpr int64_t kBlock = 1024;  // elements per scheduling unit (a multiple of 16)
constexpr int64_t kGrainBlocks = 32;  // 32K elements: smaller tensors stay on one thread

// 2-D operands whose rows are contiguous but not adjacent (the gate and up halves of a fused
// [T, 2I] projection) are mapped row by row, without a copy to contiguous first.
bool rows_contiguous(const Tensor& t) { return t.dim() == 2 && t.stride(1) == 1; }

Tensor map_rows(Activation act, const Tensor& x, const Tensor* mul) {
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = x.data<float>();
  const float* pm = mul ? mul->data<float>() : nullptr;
  float* py = out.data<float>();
  const int64_t xs = x.stride(0), ms = mul ? mul->stride(0) : 0;
  const auto activate = cpu::pointwise_kernels().activate;
  parallel_for(rows, std::max<int64_t>(1, kGrainBlocks * kBlock / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r)
                   activate(px + r * xs, pm ? pm + r * ms : nullptr, py + r * cols, cols, act);
               });
  return out;
}

Tensor map(Activation act, const Tensor& x, const Tensor* mul) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32, "activation: x must be f32");
  if (mul)
    PRISM_CHECK_MSG(mul->dtype() == DType::f32 && mul->shape() == x.shape(),
                    "swiglu: gate and up must have the same shape, f32");
  const bool all_contiguous = x.is_contiguous() && (!mul || mul->is_contiguous());
  if (!all_contiguous && rows_contiguous(x) && (!mul || rows_contiguous(*mul))) return map_rows(act, x, mul);
  const Tensor xc = x.contiguous();
  Tensor mc;
  if (mul) mc = mul->contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  const float* pm = mul ? mc.data<float>() : nullptr;
  float* py = out.data<float>();
  const int64_t n = x.numel();
  const auto activate = cpu::pointwise_kernels().activate;
  parallel_for((n + kBlock - 1) / kBlock, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    const int64_t i0 = b0 * kBlock;
    activate(px + i0, pm ? pm + i0 : nullptr, py + i0, std::min(n, b1 * kBlock) - i0, act);
  });
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x, GeluForm form) {
  return map(form == GeluForm::erf ? Activation::gelu_erf : Activation::gelu_tanh, x, nullptr);
}

Tensor silu(const Tensor& x) { return map(Activation::silu, x, nullptr); }

Tensor quick_gelu(const Tensor& x) { return map(Activation::quick_gelu, x, nullptr); }

Tensor swiglu(const Tensor& gate, const Tensor& up) { return map(Activation::silu, gate, &up); }

}  // namespace prism::ops

// GELU (erf and tanh forms), quick GELU, SiLU and SwiGLU: pointwise maps over flat f32 memory,
// 16 lanes at a time, blocks of the flat range spread over the OpenMP pool.
// NOTE: every form is written as x * (something in [0, 1]) computed with relative accuracy
// on both tails (Phi via erfc, sigmoid via exp(-x)), so large negative inputs give tiny
// results accurate to a few ulp rather than the cancellation noise of 1 + erf(x).
#include <algorithm>
#include <cmath>

#include "runtime/cpu/vec_math.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

enum class Unary : uint8_t { gelu_erf, gelu_tanh, quick_gelu, silu };

constexpr float kQuickGeluAlpha = 1.702f;  // QuickGELU: x * sigmoid(1.702 x)

constexpr int64_t kBlock = 1024;  // elements per scheduling unit (a multiple of 16)
constexpr int64_t kGrainBlocks = 32;  // 32K elements: smaller tensors stay on one thread

#ifdef __AVX512F__
__m512 apply512(Unary op, __m512 x) {
  switch (op) {
    case Unary::gelu_erf: return cpu::gelu_erf512(x);
    case Unary::gelu_tanh: return cpu::gelu_tanh512(x);
    case Unary::quick_gelu:
      return _mm512_mul_ps(x, cpu::sigmoid512(_mm512_mul_ps(x, _mm512_set1_ps(kQuickGeluAlpha))));
    case Unary::silu: return cpu::silu512(x);
  }
  return x;
}
#endif

[[maybe_unused]] float apply_scalar(Unary op, float x) {
  switch (op) {
    case Unary::gelu_erf: return cpu::gelu_erf_scalar(x);
    case Unary::gelu_tanh: return cpu::gelu_tanh_scalar(x);
    case Unary::quick_gelu: return x * cpu::sigmoid_scalar(kQuickGeluAlpha * x);
    case Unary::silu: return cpu::silu_scalar(x);
  }
  return x;
}

// y[i] = op(x[i]) * (mul ? mul[i] : 1) over [begin, end).
void map_range(Unary op, const float* x, const float* mul, float* y, int64_t begin, int64_t end) {
#ifdef __AVX512F__
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 m = end - i >= 16 ? __mmask16(0xffff) : cpu::tail_mask(end - i);
    __m512 v = apply512(op, _mm512_maskz_loadu_ps(m, x + i));
    if (mul) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, mul + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
#else
  for (int64_t i = begin; i < end; ++i) y[i] = apply_scalar(op, x[i]) * (mul ? mul[i] : 1.0f);
#endif
}

// 2-D operands whose rows are contiguous but not adjacent (the gate and up halves of a fused
// [T, 2I] projection) are mapped row by row, without a copy to contiguous first.
bool rows_contiguous(const Tensor& t) { return t.dim() == 2 && t.stride(1) == 1; }

Tensor map_rows(Unary op, const Tensor& x, const Tensor* mul) {
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = x.data<float>();
  const float* pm = mul ? mul->data<float>() : nullptr;
  float* py = out.data<float>();
  const int64_t xs = x.stride(0), ms = mul ? mul->stride(0) : 0;
  parallel_for(rows, std::max<int64_t>(1, kGrainBlocks * kBlock / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r)
                   map_range(op, px + r * xs, pm ? pm + r * ms : nullptr, py + r * cols, 0, cols);
               });
  return out;
}

Tensor map(Unary op, const Tensor& x, const Tensor* mul) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32, "activation: x must be f32");
  if (mul)
    PRISM_CHECK_MSG(mul->dtype() == DType::f32 && mul->shape() == x.shape(),
                    "swiglu: gate and up must have the same shape, f32");
  const bool all_contiguous = x.is_contiguous() && (!mul || mul->is_contiguous());
  if (!all_contiguous && rows_contiguous(x) && (!mul || rows_contiguous(*mul))) return map_rows(op, x, mul);
  const Tensor xc = x.contiguous();
  Tensor mc;
  if (mul) mc = mul->contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  const float* pm = mul ? mc.data<float>() : nullptr;
  float* py = out.data<float>();
  const int64_t n = x.numel();
  parallel_for((n + kBlock - 1) / kBlock, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    map_range(op, px, pm, py, b0 * kBlock, std::min(n, b1 * kBlock));
  });
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x, GeluForm form) {
  return map(form == GeluForm::erf ? Unary::gelu_erf : Unary::gelu_tanh, x, nullptr);
}

Tensor silu(const Tensor& x) { return map(Unary::silu, x, nullptr); }

Tensor quick_gelu(const Tensor& x) { return map(Unary::quick_gelu, x, nullptr); }

Tensor swiglu(const Tensor& gate, const Tensor& up) { return map(Unary::silu, gate, &up); }

}  // namespace prism::ops

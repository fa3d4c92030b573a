// runtime/cpu/pointwise_kernels.h: the per-tier kernels that map contiguous floats element by
// element (activations, add/mul, the widening of bf16/f16 rows, the i8 quantisation of KV
// rows), for the ops of runtime/cpu/ to call on the ranges they hand out to threads. Defined
// in runtime/cpu/kernels/pointwise.cpp, once per tier. Nothing here allocates or threads.
// NOTE: each output element depends on its inputs only, never on its lane or the range it
// was called with: splitting a range differently (rows, thread blocks) gives the same bits.
#pragma once

#include <cstdint>

#include "runtime/cpu/tier_table.h"
#include "runtime/dtype.h"
#include "runtime/ops.h"

namespace prism::cpu {

struct PointwiseKernels {
  // y[i] = act(x[i]) * (mul ? mul[i] : 1) for i < n; y may alias x.
  void (*activate)(const float* x, const float* mul, float* y, int64_t n, ops::Activation act);
  // y[i] = a[i * sa] + b[i * sb] (mul: *) for i < n, where sa, sb are 1 (a row) or 0 (one
  // value broadcast); y may alias a or b.
  void (*add)(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n);
  void (*mul)(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n);
  // y[i] = x[i] widened to f32 (exact).
  void (*bf16_to_f32)(const bf16* x, float* y, int64_t n);
  void (*f16_to_f32)(const f16* x, float* y, int64_t n);
  // q[i] = round_half_even(x[i] * inv_scale) clamped to [-127, 127] (NaN: -127).
  void (*quantize_i8)(const float* x, float inv_scale, int8_t* q, int64_t n);
  // q[i] = round_half_even(q[i] * ratio), ratio in [0, 1].
  void (*requantize_i8)(int8_t* q, float ratio, int64_t n);
};

PRISM_TIER_TABLES(PointwiseKernels, kPointwiseKernels)

inline const PointwiseKernels& pointwise_kernels() {
  static const PointwiseKernels& k =
      tier_table(avx2::kPointwiseKernels, avx512::kPointwiseKernels, avx512_bf16::kPointwiseKernels);
  return k;
}

}  // namespace prism::cpu

// runtime/cpu/rope_kernels.h: the per-tier kernels that rotate one head's rotary dims in place
// by a position's cos/sin row, for ops::apply_rope (runtime/cpu/rope.cpp) to call per (token,
// head). Defined in runtime/cpu/kernels/rope.cpp, once per tier. Nothing here allocates.
#pragma once

#include <cstdint>

#include "runtime/cpu/tier_table.h"

namespace prism::cpu {

struct RopeKernels {
  // Half style (Llama's rotate_half): x1 = x[:half], x2 = x[half:2 half];
  // x1' = x1 c - x2 s, x2' = x2 c + x1 s. c, s: [half].
  void (*rotate_half)(float* x, const float* c, const float* s, int64_t half);
  // Interleaved style (GPT-J's rotate_every_two): pairs (x[2i], x[2i + 1]) rotate by angle i.
  void (*rotate_pairs)(float* x, const float* c, const float* s, int64_t half);
  // One head of ops::rms_norm_rope_: x[0, d) = x / sqrt(mean(x^2) + eps) * w (rows.cpp's
  // rms_norm, the same sums and roundings), then the first 2 half of it rotated as
  // rotate_half / rotate_pairs would; one read and one write of x.
  void (*rms_norm_rotate_half)(float* x, int64_t d, const float* w, float eps, const float* c, const float* s,
                               int64_t half);
  void (*rms_norm_rotate_pairs)(float* x, int64_t d, const float* w, float eps, const float* c, const float* s,
                                int64_t half);
};

PRISM_TIER_TABLES(RopeKernels, kRopeKernels)

inline const RopeKernels& rope_kernels() {
  static const RopeKernels& k = tier_table(avx2::kRopeKernels, avx512::kRopeKernels, avx512_bf16::kRopeKernels);
  return k;
}

}  // namespace prism::cpu

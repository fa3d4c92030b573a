// runtime/cpu/linear_kernels.h: the per-tier kernels behind ops::linear (runtime/cpu/linear.cpp
// picks the path; these do the arithmetic). Three tables, each defined once per tier by one
// file of runtime/cpu/kernels/:
//   LinearRowKernels (linear_rows.cpp): the passes over activations and outputs around a
//     oneDNN GEMM: f32 -> bf16 rows, per-row s8 quantisation, the int8 epilogue.
//   Bf16DotKernels (linear_bf16_dot.cpp): the decode-sized bf16 linear with _mm512_dpbf16_ps
//     on oneDNN's own packed weights; null on tiers without AVX512_BF16.
//   Bf16WidenKernels (linear_bf16_widen.cpp): bf16 weights in Prism's panel layout, widened
//     to f32 inside the kernel, f32 activations and accumulation, every M: the bf16 path of
//     the tiers without native bf16 (oneDNN 2.6 has no bf16 matmul on AVX2).
// Must not: include dnnl.hpp (the kernels see plain pointers and sizes only), or allocate
// per call once warm (scratch is thread-local and only grows).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/cpu/tier_table.h"
#include "runtime/dtype.h"
#include "runtime/ops.h"

namespace prism::cpu {

// ---- row passes ----

struct LinearRowKernels {
  // out[0, k) = bf16(x[0, k)), round to nearest even (AVX512_BF16: vcvtneps2bf16, which
  // also flushes denormal inputs to zero).
  void (*to_bf16)(const float* x, int64_t k, bf16* out);
  // One row of symmetric s8 quantisation: returns scale = max|x| / 127 (1 for an all-zero
  // row) and writes out = round_half_even(x * (127 / max|x|)), in [-127, 127].
  float (*quantize_s8)(const float* x, int64_t k, int8_t* out);
  // Rows [m0, m1) of y [*, n] in place: y = act(sx[m] * y + bias[n]); bias may be null.
  void (*int8_epilogue)(float* y, int64_t m0, int64_t m1, int64_t n, const float* sx, const float* bias,
                        ops::Activation act);
};

PRISM_TIER_TABLES(LinearRowKernels, kLinearRowKernels)

inline const LinearRowKernels& linear_row_kernels() {
  static const LinearRowKernels& k =
      tier_table(avx2::kLinearRowKernels, avx512::kLinearRowKernels, avx512_bf16::kLinearRowKernels);
  return k;
}

// ---- bf16 decode on oneDNN's packed weights (AVX512_BF16) ----

// Rows up to which ops::linear (bf16, on the dpbf16 path) takes this kernel instead of
// oneDNN (see the NOTE in kernels/linear_bf16_dot.cpp). The kernel itself takes up to
// kBf16DotMaxRows rows (for tests and benches).
constexpr int64_t kSmallMMaxRows = 8;
constexpr int64_t kBf16DotMaxRows = 16;

// oneDNN's brgemm bf16 weights for a [K, N] matmul ("BA16a64b2a": blocks of 32 k x 64 n,
// the K blocks of each 64-column group back to back): element (k, n) sits at
//   (n / 64) * group_stride + (k / 2) * 128 + (n % 64) * 2 + k % 2,
// so one k pair of 16 consecutive columns is 32 bf16 (64 bytes), the operand of one
// _mm512_dpbf16_ps. Padding (K to k_pairs * 2, N to 64) holds zeros.
struct Bf16PanelWeights {
  const bf16* data = nullptr;  // not owned: the PackedLinear's oneDNN memory
  int64_t k = 0, n = 0;        // real sizes
  int64_t k_pairs = 0;         // padded K / 2
  int64_t group_stride = 0;    // elements from one 64-column group to the next
};

struct Bf16DotKernels {
  // y[rows, n] = act(x[rows, k] (row stride ld) @ W^T + bias), bias [n] or null,
  // 1 <= rows <= kBf16DotMaxRows. Null where the tier has no AVX512_BF16.
  void (*small_m)(const float* x, int64_t rows, int64_t ld, const Bf16PanelWeights& w, const float* bias,
                  ops::Activation act, float* y);
};

PRISM_TIER_TABLES(Bf16DotKernels, kBf16DotKernels)

inline const Bf16DotKernels& bf16_dot_kernels() {
  static const Bf16DotKernels& k =
      tier_table(avx2::kBf16DotKernels, avx512::kBf16DotKernels, avx512_bf16::kBf16DotKernels);
  return k;
}

// ---- bf16 weights widened to f32 (every tier; the bf16 path of avx2 and avx512) ----

// Weights [N, K] as panels of P = 2 * kLanes output columns (16 on AVX2, 32 on AVX-512):
// [panels][K][P] bf16, columns past N zero. Within one k row of panel p, position 2i holds
// column p P + i and position 2i + 1 column p P + kLanes + i, so one load of P bf16 gives
// the f32 vectors of columns [0, kLanes) and [kLanes, P) by a shift and a mask (simd.h
// load_bf16_pairs). A panel is contiguous: decode streams each once, front to back.
struct Bf16WidenWeights {
  std::shared_ptr<void> memory;  // owns the panels (64-byte aligned)
  const bf16* data = nullptr;    // panel p at data + p * k * panel_width
  int64_t n = 0, k = 0;          // real sizes
  int64_t panels = 0;            // ceil(n / panel_width)
  int panel_width = 0;           // P of the tier that packed them
};

// Packs w [n, k] bf16 row-major into panels of panel_width columns (a tier's panel_width);
// threads through OpenMP. Baseline code (runtime/cpu/linear_bf16_widen.cpp).
Bf16WidenWeights pack_bf16_widen(const bf16* w, int64_t n, int64_t k, int panel_width);

// Columns [p0 P, min(n, p1 P)) of w (panels [p0, p1)) widened to f32 as out [k, cols]
// row-major (row stride cols): the weights of a oneDNN f32 matmul over those columns. Exact
// (bf16 -> f32 is a shift). Threads through OpenMP. Baseline code, like pack_bf16_widen.
void widen_bf16_panels(const Bf16WidenWeights& w, int64_t p0, int64_t p1, float* out);

struct Bf16WidenKernels {
  int panel_width;  // P = 2 * kLanes of this tier
  // y[rows, n] (row stride n) = act(x[rows, k] (row stride ld) @ W^T + bias), bias [n] or
  // null, rows >= 1; w packed for this tier's panel_width. Threads through OpenMP.
  void (*gemm)(const float* x, int64_t rows, int64_t ld, const Bf16WidenWeights& w, const float* bias,
               ops::Activation act, float* y);
};

PRISM_TIER_TABLES(Bf16WidenKernels, kBf16WidenKernels)

inline const Bf16WidenKernels& bf16_widen_kernels() {
  static const Bf16WidenKernels& k =
      tier_table(avx2::kBf16WidenKernels, avx512::kBf16WidenKernels, avx512_bf16::kBf16WidenKernels);
  return k;
}

}  // namespace prism::cpu

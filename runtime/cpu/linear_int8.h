// runtime/cpu/linear_int8.h: Prism's own int8 linear, for tiers without VNNI, where oneDNN 2.6's
// s8 x s8 matmul is both inexact and slow: it multiplies x + 128 (u8) by w with vpmaddubsw,
// whose int16 pair sums saturate, so most sums of full-range s8 operands come out wrong
// (tests/runtime/linear_int8_test.cpp), and at decode sizes its AVX2 gemm repacks the weights
// on every call (0.3-1.2 GB/s). Internal to runtime/cpu/: PackedLinear (linear.cpp) decides per
// tier which path int8 takes; on this one it packs with int8_kernels().pack and runs
// int8_kernels().gemm.
// NOTE (numerics): the same quantisation as oneDNN's int8 path in linear.cpp — activations
// symmetric s8 per row (sx[m] = max|x[m,:]| / 127), weights symmetric s8 per output channel
// (sw[n]) — and an exact int32 accumulation, then
//   t = float(acc) * sw[n]            (rounded: oneDNN's per-N output scale),
//   y = act(fma(sx[m], t, b[n]))      (one rounding; sx[m] * t without bias),
// with activate() of runtime/cpu/kernels/vec_math.h. `epilogue` is that second line alone, for
// the oneDNN path to apply to oneDNN's output: with it both paths give bit-identical outputs
// wherever oneDNN's int32 sums are exact, which with VNNI is always
// (tests/runtime/linear_int8_test.cpp checks both on every tier).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/status.h"
#include "runtime/cpu/tier_table.h"
#include "runtime/ops.h"

namespace prism::cpu {

// Weights [N, K] in the layout of one tier's kernels (kernels/linear_int8.cpp says which: that
// tier's pack_into and gemm agree on it), with their scales.
// Immutable once packed; shared by every thread.
struct Int8Weights {
  std::shared_ptr<void> memory;  // owns the packed bytes (64-byte aligned)
  const int8_t* data = nullptr;  // packed weights
  const float* scales = nullptr;  // [N] sw, inside memory
  int64_t n = 0, k = 0;           // real sizes
  int64_t k_padded = 0, n_padded = 0;
};

// Where a tier's packed weights lie in their buffer.
struct Int8Layout {
  int64_t n_padded = 0, k_padded = 0;
  size_t scales_offset = 0;  // bytes from the start to sw [n_padded] (zero past n)
  size_t bytes = 0;          // the whole buffer
};

// K * 128 * 127 < 2^31: the int32 sums cannot overflow.
inline constexpr int64_t kInt8MaxK = 131072;

// The kernels of one tier (runtime/cpu/kernels/linear_int8.cpp).
struct Int8Kernels {
  // q: [n, k] row-major s8 (values in [-127, 127]: -128 is not allowed); scales: [n]. Packs a
  // copy in this tier's layout. invalid_argument for an empty shape or k > kInt8MaxK.
  // NOTE: this one entry is baseline code (linear_int8.cpp: <tier>::pack_int8 below, which
  // calls the tier's layout and pack_into): the kernel files own no memory and build no Result,
  // so no tier's copy instantiates shared_ptr / Result code that the linker could pick for
  // every tier (GCC compiled Result<Int8Weights>(Status) with an EVEX vpbroadcastq under
  // x86-64-v4).
  Result<Int8Weights> (*pack)(const int8_t* q, const float* scales, int64_t n, int64_t k);
  // y[rows, n] (row stride n) = act(sx[m] * (float(xq[m, :] . w[n, :]) * sw[n]) + bias[n]);
  // xq: [rows, k] s8 contiguous (quantised by the caller, values in [-127, 127]); sx: [rows];
  // bias: [n] or null. Threads through OpenMP; no allocation once warm.
  void (*gemm)(const int8_t* xq, int64_t rows, const float* sx, const Int8Weights& w, const float* bias,
               ops::Activation act, float* y);
  // y[rows, n] = act(fma(sx[m], y[m, n], bias[n])) in place (sx[m] * y without bias): gemm's
  // epilogue alone, for a GEMM that already applied sw (oneDNN's output scales). Threads
  // through OpenMP; no allocation.
  void (*epilogue)(float* y, int64_t rows, int64_t n, const float* sx, const float* bias, ops::Activation act);
  // The pieces of pack: the layout's sizes, and the bytes written into dst (layout(n, k).bytes,
  // 64-byte aligned), n and k already checked.
  Int8Layout (*layout)(int64_t n, int64_t k);
  void (*pack_into)(const int8_t* q, const float* scales, int64_t n, int64_t k, void* dst);
};

PRISM_TIER_TABLES(Int8Kernels, kInt8Kernels)

// Each tier's Int8Kernels::pack (linear_int8.cpp).
namespace avx2 { Result<Int8Weights> pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k); }
namespace avx512 { Result<Int8Weights> pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k); }
namespace avx512_bf16 { Result<Int8Weights> pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k); }

inline const Int8Kernels& int8_kernels() {
  static const Int8Kernels& k = tier_table(avx2::kInt8Kernels, avx512::kInt8Kernels, avx512_bf16::kInt8Kernels);
  return k;
}

}  // namespace prism::cpu

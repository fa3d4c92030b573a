// runtime/cpu/row_kernels.h: the per-tier kernels that work along one row of floats (norms,
// softmax, and the reductions and scans of a row that the sampler and the i8 KV cache need),
// for the code of runtime/ to call inside its loops. Defined in runtime/cpu/kernels/rows.cpp,
// once per tier. Rows are contiguous; nothing here allocates or threads.
// NOTE: whatever is exact (max, absmax, compares) gives the same answer on every tier;
// block_sums adds in one fixed order on every tier too (see there), so its sums are the same
// bits on AVX2 and AVX-512.
#pragma once

#include <cstdint>

#include "runtime/cpu/tier_table.h"

namespace prism::cpu {

// Elements per block of RowKernels::block_sums.
inline constexpr int64_t kRowSumBlock = 16;

struct RowKernels {
  // y = (x - mean) / sqrt(var + eps) * w + b over h floats; b may be null.
  void (*layer_norm)(const float* x, float* y, int64_t h, const float* w, const float* b, float eps);
  // y = x / sqrt(mean(x^2) + eps) * w.
  void (*rms_norm)(const float* x, float* y, int64_t h, const float* w, float eps);
  // x += y / sqrt(mean(y^2) + eps) * w: rms_norm's floats added to x (the gated residual of
  // an adaLN block), without writing the normed row.
  void (*add_rms_norm)(float* x, const float* y, int64_t h, const float* w, float eps);
  // y = exp(x - max) / sum; y may alias x.
  void (*softmax)(const float* x, float* y, int64_t h);

  // The largest of n floats, NaNs skipped; -inf when n is 0 or every value is NaN.
  float (*max)(const float* x, int64_t n);
  // max |x[i]| (0 for n = 0); NaNs are not meant to be there.
  float (*absmax)(const float* x, int64_t n);
  // The first i with x[i] == value (x[i] > value for find_above), n when there is none.
  int64_t (*find_equal)(const float* x, int64_t n, float value);
  int64_t (*find_above)(const float* x, int64_t n, float threshold);
  // y = exp(x - shift), 0 where that is NaN (NaN inputs, inf - inf); y may alias x.
  void (*exp_shifted)(const float* x, float* y, int64_t n, float shift);
  // sums[b] = x[16b] + ... + x[16b + 15] (the last block may be short) for every block, each
  // as the pairwise tree (i, i + 8), (i, i + 4), (i, i + 2), (i, i + 1): one register's
  // horizontal sum on AVX-512, the same adds on AVX2. Returns the sums added in block order
  // in double.
  double (*block_sums)(const float* x, int64_t n, float* sums);
};

PRISM_TIER_TABLES(RowKernels, kRowKernels)

inline const RowKernels& row_kernels() {
  static const RowKernels& k = tier_table(avx2::kRowKernels, avx512::kRowKernels, avx512_bf16::kRowKernels);
  return k;
}

}  // namespace prism::cpu

// runtime/row_math.h: reductions and scans over one row of floats for code outside the ops
// (the sampler's passes over a row of logits), run by the kernels of the active instruction-set
// tier (runtime/isa.h). Plain functions over spans: no tensors, no threads, no allocation.
// NOTE: max_value, first_equal and first_above are exact, the same answer on every tier;
// block_sums adds each block in one fixed order on every tier, so a total built from its sums
// and a scan that re-adds them agree to the bit; exp_shifted is within ~1 ulp of std::exp.
#pragma once

#include <cstddef>
#include <span>

namespace prism::row_math {

// The largest value; NaNs never win; -inf for an empty row or one of only -inf / NaN.
float max_value(std::span<const float> x);

// The first index i with x[i] == value, or x.size() when there is none.
size_t first_equal(std::span<const float> x, float value);
// The first index i with x[i] > threshold (false for NaN), or x.size() when there is none.
size_t first_above(std::span<const float> x, float threshold);

// out[i] = exp(x[i] - shift), and 0 where that is NaN (a NaN value; inf - inf). out has
// x.size() floats and may be x itself.
void exp_shifted(std::span<const float> x, float shift, std::span<float> out);

// Elements per block of block_sums.
inline constexpr size_t kSumBlock = 16;
// sums[b] = the sum of x[b * kSumBlock, (b + 1) * kSumBlock) (the last block may be short),
// sums having (x.size() + kSumBlock - 1) / kSumBlock floats; returns the total, those sums
// added in order in double (what a scan that re-adds them in order reaches).
double block_sums(std::span<const float> x, std::span<float> sums);

}  // namespace prism::row_math

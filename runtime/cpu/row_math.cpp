// runtime/row_math.h on the cpu: each function hands the whole row to the active tier's row
// kernel (runtime/cpu/kernels/rows.cpp).
#include "runtime/row_math.h"

#include "base/check.h"
#include "runtime/cpu/row_kernels.h"

namespace prism::row_math {

float max_value(std::span<const float> x) { return cpu::row_kernels().max(x.data(), int64_t(x.size())); }

size_t first_equal(std::span<const float> x, float value) {
  return size_t(cpu::row_kernels().find_equal(x.data(), int64_t(x.size()), value));
}

size_t first_above(std::span<const float> x, float threshold) {
  return size_t(cpu::row_kernels().find_above(x.data(), int64_t(x.size()), threshold));
}

void exp_shifted(std::span<const float> x, float shift, std::span<float> out) {
  PRISM_CHECK(out.size() == x.size());
  cpu::row_kernels().exp_shifted(x.data(), out.data(), int64_t(x.size()), shift);
}

double block_sums(std::span<const float> x, std::span<float> sums) {
  static_assert(kSumBlock == size_t(cpu::kRowSumBlock));
  PRISM_CHECK(sums.size() == (x.size() + kSumBlock - 1) / kSumBlock);
  return cpu::row_kernels().block_sums(x.data(), int64_t(x.size()), sums.data());
}

}  // namespace prism::row_math

// runtime/row_math.h (the sampler's passes over a row) on every length from 0 to 40 (whole
// vectors of 8 and 16 lanes plus every masked tail), with NaN, +-inf and ties where the
// functions promise behaviour; and the exact kernels of every tier this CPU runs compared in
// one process (they must agree to the bit).
#include "runtime/row_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/cpu/row_kernels.h"
#include "runtime/isa.h"

namespace prism {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_row(size_t n, uint32_t seed, float lo = -10.0f, float hi = 10.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The lengths the tiers split differently: each tail length of 8 and 16 lanes, a few wholes.
std::vector<size_t> lengths() {
  std::vector<size_t> n;
  for (size_t i = 0; i <= 40; ++i) n.push_back(i);
  for (size_t i : {63, 64, 65, 1000}) n.push_back(i);
  return n;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint64_t bits_of(double f) {
  uint64_t u;
  std::memcpy(&u, &f, 8);
  return u;
}

TEST(RowMathTest, MaxValueAndFirstIndexAtEveryPosition) {
  for (size_t n : lengths()) {
    EXPECT_EQ(row_math::max_value(std::vector<float>(n, -kInf)), -kInf) << n;
    for (size_t at = 0; at < n; ++at) {
      std::vector<float> x = random_row(n, uint32_t(n * 100 + at), -10.0f, 10.0f);
      x[at] = 20.0f;
      ASSERT_EQ(row_math::max_value(x), 20.0f) << n << " " << at;
      ASSERT_EQ(row_math::first_equal(x, 20.0f), at) << n << " " << at;
      ASSERT_EQ(row_math::first_above(x, 15.0f), at) << n << " " << at;
      // A tie later on: the first one still wins.
      for (size_t later = at + 1; later < n; later += 5) {
        std::vector<float> y = x;
        y[later] = 20.0f;
        ASSERT_EQ(row_math::first_equal(y, 20.0f), at);
      }
    }
    // None at all: x.size().
    const std::vector<float> x = random_row(n, uint32_t(n));
    EXPECT_EQ(row_math::first_equal(x, 20.0f), n);
    EXPECT_EQ(row_math::first_above(x, 10.0f), n);
  }
  EXPECT_EQ(row_math::max_value({}), -kInf);
}

TEST(RowMathTest, NaNNeverWinsOrMatches) {
  for (size_t n : lengths()) {
    if (n == 0) continue;
    std::vector<float> x = random_row(n, uint32_t(n) + 7);
    for (size_t i = 0; i < n; i += 3) x[i] = kNaN;
    float want = -kInf;
    for (float v : x)
      if (v > want) want = v;
    EXPECT_EQ(row_math::max_value(x), want) << n;
    EXPECT_EQ(row_math::first_equal(x, kNaN), n);
    size_t above = n;
    for (size_t i = 0; i < n && above == n; ++i)
      if (x[i] > 0.0f) above = i;
    EXPECT_EQ(row_math::first_above(x, 0.0f), above) << n;
    EXPECT_EQ(row_math::max_value(std::vector<float>(n, kNaN)), -kInf) << n;
  }
}

TEST(RowMathTest, FirstAboveHonoursInfinities) {
  for (size_t n : {1, 7, 8, 9, 15, 16, 17, 33}) {
    std::vector<float> x(n, -kInf);
    EXPECT_EQ(row_math::first_above(x, -kInf), n);
    EXPECT_EQ(row_math::first_above(x, -std::numeric_limits<float>::max()), n);
    x[n - 1] = kInf;
    EXPECT_EQ(row_math::first_above(x, std::numeric_limits<float>::max()), n - 1);
    EXPECT_EQ(row_math::max_value(x), kInf);
  }
}

// exp within 2 ulp of the double-precision value of the same f32 argument; -inf and NaN
// arguments (and inf - inf) give exactly 0; below the denormals exactly 0.
TEST(RowMathTest, ExpShiftedMatchesStdExpAndZeroesNaN) {
  for (size_t n : lengths()) {
    std::vector<float> x = random_row(n, uint32_t(n) + 11, -110.0f, 5.0f);
    if (n > 2) x[1] = -kInf, x[n - 1] = kNaN;
    const float shift = 3.5f;
    std::vector<float> y(n, -1.0f);
    row_math::exp_shifted(x, shift, y);
    for (size_t i = 0; i < n; ++i) {
      if (!(x[i] > -kInf)) {
        EXPECT_EQ(bits_of(y[i]), 0u) << n << " " << i;
        continue;
      }
      const double want = std::exp(double(x[i] - shift));
      const double ulp = want < 0x1p-126 ? 0x1p-149 : std::ldexp(1.0, std::ilogb(want) - 23);
      EXPECT_LE(std::fabs(double(y[i]) - want), 2 * ulp) << n << " " << i << " x=" << x[i];
    }
  }
  std::vector<float> x = {kInf, 1.0f, -kInf, kNaN};
  row_math::exp_shifted(x, kInf, x);  // in place; inf - inf is NaN: 0
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], 0.0f);
}

// Each block as the documented tree: (i, i + 8), then (i, i + 4), (i, i + 2), (0, 1).
float tree_sum(const float* x, size_t n) {
  float v[16] = {};
  for (size_t i = 0; i < n && i < 16; ++i) v[i] = x[i];
  for (int width = 8; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) v[i] = v[i] + v[i + width];
  return v[0];
}

TEST(RowMathTest, BlockSumsFollowTheDocumentedOrderBitForBit) {
  for (size_t n : lengths()) {
    // Magnitudes spread over 2^40, so that another order of adds would round differently.
    std::vector<float> x = random_row(n, uint32_t(n) + 13);
    for (size_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], int(i * 7 % 41));
    const size_t blocks = (n + row_math::kSumBlock - 1) / row_math::kSumBlock;
    std::vector<float> sums(blocks, -1.0f);
    const double total = row_math::block_sums(x, sums);
    double want_total = 0;
    for (size_t b = 0; b < blocks; ++b) {
      const size_t len = std::min(row_math::kSumBlock, n - b * row_math::kSumBlock);
      EXPECT_EQ(bits_of(sums[b]), bits_of(tree_sum(x.data() + b * row_math::kSumBlock, len))) << n << " " << b;
      want_total += sums[b];
    }
    EXPECT_EQ(total, want_total) << n;
  }
}

// The tiers this CPU can run, lowest first.
std::vector<Isa> runnable_tiers() {
  std::vector<Isa> out;
  for (Isa isa : all_isas())
    if (isa != Isa::amx && cpu_supports(isa)) out.push_back(isa);
  return out;
}

const cpu::RowKernels& row_kernels_of(Isa isa) {
  return cpu::tier_table_for(isa, cpu::avx2::kRowKernels, cpu::avx512::kRowKernels, cpu::avx512_bf16::kRowKernels);
}

TEST(RowMathTest, ExactKernelsAgreeAcrossTiers) {
  const std::vector<Isa> tiers = runnable_tiers();
  if (tiers.size() < 2) GTEST_SKIP() << "only one tier runs on this CPU";
  for (size_t n : lengths()) {
    std::vector<float> x = random_row(n, uint32_t(n) + 17, -100.0f, 3.0f);
    for (size_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], int(i * 5 % 29));
    if (n > 3) x[2] = kNaN, x[3] = -kInf;
    const int64_t len = int64_t(n);
    const cpu::RowKernels& base = row_kernels_of(tiers[0]);
    std::vector<float> sums0((n + 15) / 16), e0(n);
    base.block_sums(x.data(), len, sums0.data());
    base.exp_shifted(x.data(), e0.data(), len, 1.0f);
    for (size_t t = 1; t < tiers.size(); ++t) {
      const cpu::RowKernels& k = row_kernels_of(tiers[t]);
      const std::string where = std::string(isa_name(tiers[t])) + " n=" + std::to_string(n);
      EXPECT_EQ(bits_of(k.max(x.data(), len)), bits_of(base.max(x.data(), len))) << where;
      EXPECT_EQ(k.find_equal(x.data(), len, 3.0f), base.find_equal(x.data(), len, 3.0f)) << where;
      EXPECT_EQ(k.find_above(x.data(), len, 0.5f), base.find_above(x.data(), len, 0.5f)) << where;
      std::vector<float> sums((n + 15) / 16), e(n);
      const double total = k.block_sums(x.data(), len, sums.data());
      EXPECT_EQ(bits_of(total), bits_of(base.block_sums(x.data(), len, sums0.data()))) << where;
      for (size_t b = 0; b < sums.size(); ++b) EXPECT_EQ(bits_of(sums[b]), bits_of(sums0[b])) << where;
      // exp: the same polynomial and the same single rounding of p * 2^n on every tier.
      k.exp_shifted(x.data(), e.data(), len, 1.0f);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(bits_of(e[i]), bits_of(e0[i])) << where << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace prism

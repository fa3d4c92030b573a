// engines/denoise/noise: the frozen seed -> initial latent algorithm. Philox4x32-10 against
// Random123's known-answer vectors; golden values for two seeds (an independent Python
// re-statement of noise.h's NOTE gives the same floats), so any change to the generator fails
// here; element values independent of the tensor's size; standard normal statistics.
#include "engines/denoise/noise.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace prism::engines::denoise {
namespace {

TEST(DenoiseNoise, PhiloxKnownAnswers) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(DenoiseNoise, GoldenValuesAreStable) {
  const Tensor a = gaussian_noise({7}, 42);
  const float expected_a[] = {-0x1.54ac04p-1f, 0x1.0938dcp+0f, -0x1.6f135cp+0f, 0x1.b16fd6p-2f,
                              0x1.147f0ap-3f,  -0x1.cf0bbcp-1f, -0x1.4be782p-1f};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(a.data<float>()[i], expected_a[i]) << i;
  const Tensor b = gaussian_noise({3}, 0xFFFFFFFFFFFFFFFFull);
  const float expected_b[] = {1.47851872f, 1.67001486f, -1.10807872f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(b.data<float>()[i], expected_b[i], 1e-7) << i;
}

TEST(DenoiseNoise, ElementsDependOnlyOnSeedAndIndex) {
  const Tensor big = gaussian_noise({2, 3, 5}, 7);
  const Tensor odd = gaussian_noise({29}, 7);
  for (int64_t e = 0; e < 29; ++e) EXPECT_EQ(odd.data<float>()[e], big.data<float>()[e]) << e;
  const Tensor other = gaussian_noise({2, 3, 5}, 8);
  int equal = 0;
  for (int64_t e = 0; e < 30; ++e) equal += other.data<float>()[e] == big.data<float>()[e];
  EXPECT_EQ(equal, 0);
}

TEST(DenoiseNoise, StandardNormalStatistics) {
  const int64_t n = 200000;
  const Tensor t = gaussian_noise({n}, 123);
  double sum = 0, sq = 0, fourth = 0;
  for (int64_t e = 0; e < n; ++e) {
    const double v = t.data<float>()[e];
    sum += v, sq += v * v, fourth += v * v * v * v;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);   // 4.5 sigma of the sample mean
  EXPECT_NEAR(var, 1.0, 0.015);
  EXPECT_NEAR(fourth / n, 3.0, 0.1);  // the normal's kurtosis
}

}  // namespace
}  // namespace prism::engines::denoise

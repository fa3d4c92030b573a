// ops::rms_norm_segments and ops::add_rms_norm_ (the row-segmented RMSNorm and the one-pass
// gated residual of adaLN blocks): against a naive double-precision RMSNorm with a bound
// derived from the f32 steps, and bit for bit against what they replace (rms_norm of each
// segment with its weight; add_ of that), on strided rows and empty segments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>

#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism {
namespace {

using test::random_f32;

// NOTE: the bound. u = 2^-24. The f32 sum of H squares (kLanes accumulators of H / kLanes
// terms, a tree of log2(kLanes) adds) errs by <= (H / kLanes + log2 kLanes + 2) u relative:
// 45 u for H = 300 on AVX2; the reciprocal square root halves that and adds 2 u, the two
// products 2 u: |y - ref| <= 27 u |ref|; 48 u |ref| is asserted (plus, for the residual add,
// one rounding of |x + y|).
constexpr double kU = 1.0 / (1 << 24);

struct Segmented {
  Tensor x;        // [T, H] (a strided view: rows of a wider buffer)
  Tensor weights;  // [B, H]
  Tensor cu;       // [B + 1] i32
  std::vector<int32_t> cu_host;
};

Segmented make(int64_t h, const std::vector<int32_t>& lens, uint32_t seed) {
  Segmented s;
  s.cu_host = {0};
  for (int32_t n : lens) s.cu_host.push_back(s.cu_host.back() + n);
  const int64_t t = s.cu_host.back(), b = int64_t(lens.size());
  s.x = random_f32({t, h + 5}, seed).slice(1, 2, 2 + h);
  s.weights = random_f32({b, h}, seed + 1);
  s.cu = Tensor::from<int32_t>(std::span<const int32_t>(s.cu_host), {b + 1});
  return s;
}

double ref_norm(const Segmented& s, int64_t r, int64_t i, float eps) {
  const int64_t h = s.x.size(1);
  int64_t b = 0;
  while (s.cu_host[b + 1] <= r) ++b;
  const float* row = s.x.data<float>() + r * s.x.stride(0);
  double ss = 0;
  for (int64_t j = 0; j < h; ++j) ss += double(row[j]) * row[j];
  return double(row[i]) / std::sqrt(ss / double(h) + eps) * s.weights.data<float>()[b * h + i];
}

TEST(RmsNormSegmentsTest, MatchesNaiveReferenceAndPerSegmentRmsNorm) {
  const float eps = 1e-5f;
  for (int64_t h : {1, 7, 64, 300})
    for (const std::vector<int32_t>& lens : {std::vector<int32_t>{5}, {3, 0, 9, 1}, {40, 33}}) {
      const Segmented s = make(h, lens, 3);
      const Tensor y = ops::rms_norm_segments(s.x, s.weights, s.cu, eps);
      ASSERT_EQ(y.shape(), Dims({s.x.size(0), h}));
      for (int64_t r = 0; r < s.x.size(0); ++r)
        for (int64_t i = 0; i < h; ++i) {
          const double ref = ref_norm(s, r, i, eps);
          ASSERT_LE(std::abs(y.data<float>()[r * h + i] - ref), 48 * kU * std::abs(ref) + 1e-30)
              << "h " << h << " row " << r << " dim " << i;
        }
      for (size_t b = 0; b < lens.size(); ++b) {
        const int64_t r0 = s.cu_host[b], r1 = s.cu_host[b + 1];
        if (r0 == r1) continue;
        const Tensor per = ops::rms_norm(s.x.slice(0, r0, r1), s.weights.select(0, int64_t(b)), eps);
        EXPECT_EQ(std::memcmp(per.data<float>(), y.data<float>() + r0 * h, size_t(per.numel()) * 4), 0);
      }
    }
}

TEST(RmsNormSegmentsTest, OneWeightForAllRows) {
  const Segmented s = make(64, {10}, 5);
  const Tensor w = s.weights.select(0, 0);  // [H]
  const Tensor a = ops::rms_norm_segments(s.x, w, Tensor(), 1e-6f), b = ops::rms_norm(s.x, w, 1e-6f);
  EXPECT_EQ(std::memcmp(a.data<float>(), b.data<float>(), size_t(a.numel()) * 4), 0);
}

TEST(AddRmsNormTest, MatchesNaiveReferenceAndAddOfRmsNorm) {
  const float eps = 1e-5f;
  for (int64_t h : {1, 7, 64, 300})
    for (const std::vector<int32_t>& lens : {std::vector<int32_t>{5}, {3, 0, 9, 1}, {40, 33}}) {
      const Segmented s = make(h, lens, 9);
      const int64_t t = s.x.size(0);
      const Tensor x0 = random_f32({t, h}, 17);
      Tensor fused = x0.clone();
      ops::add_rms_norm_(fused, s.x, s.weights, s.cu, eps);
      Tensor unfused = x0.clone();
      for (size_t b = 0; b < lens.size(); ++b) {
        const int64_t r0 = s.cu_host[b], r1 = s.cu_host[b + 1];
        if (r0 == r1) continue;
        Tensor part = unfused.slice(0, r0, r1);
        ops::add_(part, ops::rms_norm(s.x.slice(0, r0, r1), s.weights.select(0, int64_t(b)), eps));
      }
      EXPECT_EQ(std::memcmp(fused.data<float>(), unfused.data<float>(), size_t(t * h) * 4), 0) << "h " << h;
      for (int64_t r = 0; r < t; ++r)
        for (int64_t i = 0; i < h; ++i) {
          const double n = ref_norm(s, r, i, eps), ref = double(x0.data<float>()[r * h + i]) + n;
          ASSERT_LE(std::abs(fused.data<float>()[r * h + i] - ref), 48 * kU * std::abs(n) + kU * std::abs(ref) + 1e-30)
              << "h " << h << " row " << r << " dim " << i;
        }
    }
}

}  // namespace
}  // namespace prism

// layer_norm, rms_norm and softmax against naive double-precision references: odd widths,
// 3-D inputs, a large mean, -inf masks and rows large enough to run on several threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism {
namespace {

using test::all_close;
using test::random_f32;
using test::to_doubles;

std::vector<double> ref_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const std::vector<double> v = to_doubles(x), wv = to_doubles(w);
  const std::vector<double> bv = b.defined() ? to_doubles(b) : std::vector<double>(wv.size(), 0.0);
  const size_t h = wv.size();
  std::vector<double> out(v.size());
  for (size_t r = 0; r < v.size() / h; ++r) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < h; ++i) mean += v[r * h + i];
    mean /= h;
    for (size_t i = 0; i < h; ++i) var += (v[r * h + i] - mean) * (v[r * h + i] - mean);
    var /= h;
    for (size_t i = 0; i < h; ++i) out[r * h + i] = (v[r * h + i] - mean) / std::sqrt(var + eps) * wv[i] + bv[i];
  }
  return out;
}

std::vector<double> ref_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  const std::vector<double> v = to_doubles(x), wv = to_doubles(w);
  const size_t h = wv.size();
  std::vector<double> out(v.size());
  for (size_t r = 0; r < v.size() / h; ++r) {
    double ms = 0;
    for (size_t i = 0; i < h; ++i) ms += v[r * h + i] * v[r * h + i];
    const double s = 1.0 / std::sqrt(ms / h + eps);
    for (size_t i = 0; i < h; ++i) out[r * h + i] = v[r * h + i] * s * wv[i];
  }
  return out;
}

std::vector<double> ref_softmax(const Tensor& x) {
  const std::vector<double> v = to_doubles(x);
  const size_t h = x.size(-1);
  std::vector<double> out(v.size());
  for (size_t r = 0; r < v.size() / h; ++r) {
    double mx = -INFINITY, sum = 0;
    for (size_t i = 0; i < h; ++i) mx = std::max(mx, v[r * h + i]);
    for (size_t i = 0; i < h; ++i) sum += out[r * h + i] = std::exp(v[r * h + i] - mx);
    for (size_t i = 0; i < h; ++i) out[r * h + i] /= sum;
  }
  return out;
}

TEST(NormTest, LayerNormMatchesReference) {
  for (const Dims& shape : {Dims{3, 77}, Dims{2, 3, 5}, Dims{1, 1}, Dims{4, 16}, Dims{300, 768}}) {
    const int64_t h = shape[shape.size() - 1];
    const Tensor x = random_f32(shape, 1);
    const Tensor w = random_f32({h}, 2, 0.5f, 1.5f), b = random_f32({h}, 3);
    EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, 1e-5f), ref_layer_norm(x, w, b, 1e-5), 1e-5, 1e-5))
        << shape.to_string();
    EXPECT_TRUE(all_close(ops::layer_norm(x, w, Tensor(), 1e-6f), ref_layer_norm(x, w, Tensor(), 1e-6), 1e-5, 1e-5))
        << shape.to_string() << " without bias";
  }
}

TEST(NormTest, LayerNormKeepsVarianceUnderLargeMean) {
  // Values 1000 +- 1: a one-pass E[x^2] - E[x]^2 in f32 would lose the variance entirely
  // (errors ~0.1). What remains is the f32 rounding of the mean itself (half an ulp of 1000,
  // 3e-5, over a std of 0.58, times |w| <= 3): ~2e-4 absolute.
  const Tensor x = ops::add(random_f32({4, 129}, 4, -1.0f, 1.0f), Tensor::from<float>({1000.0f}, {1}));
  const Tensor w = random_f32({129}, 5), b = random_f32({129}, 6);
  EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, 1e-5f), ref_layer_norm(x, w, b, 1e-5), 1e-5, 3e-4));
}

TEST(NormTest, RmsNormMatchesReference) {
  for (const Dims& shape : {Dims{4, 77}, Dims{2, 3, 5}, Dims{1, 1}, Dims{2, 4096}, Dims{64, 2048}}) {
    const int64_t h = shape[shape.size() - 1];
    const Tensor x = random_f32(shape, 7);
    const Tensor w = random_f32({h}, 8);
    EXPECT_TRUE(all_close(ops::rms_norm(x, w, 1e-6f), ref_rms_norm(x, w, 1e-6), 1e-5, 1e-6)) << shape.to_string();
  }
}

TEST(NormTest, NormsAcceptStridedInput) {
  const Tensor x = random_f32({77, 6}, 9).transpose(0, 1);  // [6, 77], rows not contiguous
  const Tensor w = random_f32({77}, 10), b = random_f32({77}, 11);
  EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, 1e-5f), ref_layer_norm(x, w, b, 1e-5), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(ops::rms_norm(x, w, 1e-5f), ref_rms_norm(x, w, 1e-5), 1e-5, 1e-6));
}

TEST(NormTest, SoftmaxMatchesReference) {
  for (const Dims& shape : {Dims{5, 77}, Dims{2, 3, 17}, Dims{1}, Dims{3, 1}, Dims{128, 1000}}) {
    const Tensor x = random_f32(shape, 12, -20.0f, 20.0f);
    EXPECT_TRUE(all_close(ops::softmax(x), ref_softmax(x), 1e-5, 1e-9)) << shape.to_string();
  }
}

// Every row width from 1 to 33: whole vectors of 8 (AVX2) and 16 (AVX-512) lanes and every
// masked tail, where a lane read as 0 instead of being left out would shift the statistics.
TEST(NormTest, EveryTailWidthMatchesReference) {
  for (int64_t h = 1; h <= 33; ++h) {
    const Tensor x = random_f32({3, h}, uint32_t(h), 2.0f, 6.0f);  // far from 0: a stray 0 shows
    const Tensor w = random_f32({h}, uint32_t(50 + h), 0.5f, 1.5f), b = random_f32({h}, uint32_t(100 + h));
    EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, 1e-5f), ref_layer_norm(x, w, b, 1e-5), 1e-5, 1e-5)) << h;
    EXPECT_TRUE(all_close(ops::rms_norm(x, w, 1e-6f), ref_rms_norm(x, w, 1e-6), 1e-5, 1e-6)) << h;
    Tensor masked = random_f32({3, h}, uint32_t(150 + h), -20.0f, -10.0f);  // below 0: a stray 0 would win the max
    masked.data<float>()[h - 1] = -INFINITY;                                // the last lane of a tail
    EXPECT_TRUE(all_close(ops::softmax(masked), ref_softmax(masked), 1e-5, 1e-9)) << h;
    if (h > 1) {
      EXPECT_EQ(ops::softmax(masked).data<float>()[h - 1], 0.0f) << h;
    }
  }
}

TEST(NormTest, SoftmaxIsStableAndHonoursMasks) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from<float>({1000.0f, 999.0f, -inf, 998.0f,  //
                                        -inf, 0.5f, -inf, -inf,        //
                                        -100.0f, 0.0f, 50.0f, -50.0f},
                                       {3, 4});
  const Tensor y = ops::softmax(x);
  EXPECT_TRUE(all_close(y, ref_softmax(x), 1e-6, 1e-12));
  EXPECT_EQ(y.data<float>()[2], 0.0f);  // masked: exactly zero, not a denormal
  EXPECT_EQ(y.data<float>()[5], 1.0f);
  EXPECT_TRUE(std::isnan(ops::softmax(Tensor::from<float>({-inf, -inf}, {1, 2})).data<float>()[0]));
}

}  // namespace
}  // namespace prism

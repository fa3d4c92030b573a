// group_norm, upsample_nearest, relu and tanh against naive double-precision references
// (groups of one channel and of all channels, no affine, a large mean, several threads) and
// against PyTorch's F.group_norm / F.interpolate numbers (op_reference.py).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops.h"
#include "test_util/eltwise.h"
#include "test_util/paths.h"

namespace prism {
namespace {

using test::all_close;
using test::random_f32;
using test::to_doubles;

std::vector<double> ref_group_norm(const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups, double eps,
                                   bool silu) {
  const std::vector<double> v = to_doubles(x);
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3), cg = c / groups;
  const std::vector<double> wv = w.defined() ? to_doubles(w) : std::vector<double>(c, 1.0);
  const std::vector<double> bv = b.defined() ? to_doubles(b) : std::vector<double>(c, 0.0);
  std::vector<double> out(v.size());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = (s * c + g * cg) * hw, size = cg * hw;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < size; ++i) mean += v[base + i];
      mean /= size;
      for (int64_t i = 0; i < size; ++i) var += (v[base + i] - mean) * (v[base + i] - mean);
      var /= size;
      for (int64_t i = 0; i < size; ++i) {
        const int64_t ch = g * cg + i / hw;
        const double y = (v[base + i] - mean) / std::sqrt(var + eps) * wv[ch] + bv[ch];
        out[base + i] = silu ? y / (1 + std::exp(-y)) : y;
      }
    }
  return out;
}

TEST(ImageOpsTest, GroupNormMatchesReference) {
  struct Case {
    Dims shape;
    int64_t groups;
    bool affine, silu;
    float offset;
  };
  const Case cases[] = {
      {{2, 8, 5, 3}, 4, true, false, 0.0f},
      {{1, 6, 4, 4}, 6, true, true, 0.0f},       // one channel per group (InstanceNorm-like)
      {{3, 4, 1, 7}, 1, false, false, 0.0f},     // one group (LayerNorm over C, H, W), no affine
      {{1, 64, 32, 32}, 32, true, true, 50.0f},  // a VAE's shape: 32 groups, large mean, many threads
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    Tensor x = random_f32(c.shape, seed++);
    if (c.offset != 0.0f)
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += c.offset;
    const Tensor w = c.affine ? random_f32({c.shape[1]}, seed++) : Tensor();
    const Tensor b = c.affine ? random_f32({c.shape[1]}, seed++) : Tensor();
    const Tensor y = ops::group_norm(x, w, b, c.groups, 1e-6f, c.silu);
    EXPECT_EQ(y.shape(), c.shape);
    EXPECT_TRUE(all_close(y, ref_group_norm(x, w, b, c.groups, 1e-6, c.silu), 1e-5, 1e-5));
  }
}

TEST(ImageOpsTest, UpsampleNearestRepeatsEachPixel) {
  const Tensor x = random_f32({2, 3, 4, 5}, 7);
  for (int64_t f : {1, 2, 3}) {
    const Tensor y = ops::upsample_nearest(x, f);
    ASSERT_EQ(y.shape(), (Dims{2, 3, 4 * f, 5 * f}));
    const std::vector<double> v = to_doubles(x);
    std::vector<double> want(y.numel());
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t i = 0; i < 4 * f; ++i)
        for (int64_t j = 0; j < 5 * f; ++j) want[(p * 4 * f + i) * 5 * f + j] = v[(p * 4 + i / f) * 5 + j / f];
    EXPECT_TRUE(all_close(y, want, 0, 0)) << "factor " << f;
  }
}

TEST(ImageOpsTest, ReluAndTanhMatchTheirFormulas) {
  const Tensor x = random_f32({3, 70001}, 11, -6, 6);  // odd length: vector tails, several threads
  const std::vector<double> v = to_doubles(x);
  std::vector<double> want_relu(v.size()), want_tanh(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    want_relu[i] = std::max(v[i], 0.0);
    want_tanh[i] = std::tanh(v[i]);
  }
  EXPECT_TRUE(all_close(ops::relu(x), want_relu, 0, 0));
  EXPECT_TRUE(all_close(ops::tanh(x), want_tanh, 1e-6, 1e-7));
}

TEST(ImageOpsTest, GroupNormMatchesPyTorch) {
  const std::string dir = test::scratch_dir("image_ops_group_norm");
  ASSERT_TRUE(test::run_reference("op_reference.py", "group_norm " + dir).ok());
  const Tensor x = test::read_bin(dir + "/x.bin", {2, 12, 5, 7}, DType::f32);
  const Tensor w = test::read_bin(dir + "/w.bin", {12}, DType::f32);
  const Tensor b = test::read_bin(dir + "/b.bin", {12}, DType::f32);
  EXPECT_TRUE(all_close(ops::group_norm(x, w, b, 4, 1e-6f),
                        to_doubles(test::read_bin(dir + "/out.bin", {2, 12, 5, 7}, DType::f32)), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(ops::group_norm(x, w, b, 4, 1e-6f, /*silu=*/true),
                        to_doubles(test::read_bin(dir + "/out_silu.bin", {2, 12, 5, 7}, DType::f32)), 1e-5, 1e-5));
}

TEST(ImageOpsTest, UpsampleNearestMatchesPyTorch) {
  const std::string dir = test::scratch_dir("image_ops_upsample");
  ASSERT_TRUE(test::run_reference("op_reference.py", "upsample_nearest " + dir).ok());
  const Tensor x = test::read_bin(dir + "/x.bin", {2, 3, 5, 4}, DType::f32);
  EXPECT_TRUE(all_close(ops::upsample_nearest(x, 2),
                        to_doubles(test::read_bin(dir + "/out2.bin", {2, 3, 10, 8}, DType::f32)), 0, 0));
  EXPECT_TRUE(all_close(ops::upsample_nearest(x, 3),
                        to_doubles(test::read_bin(dir + "/out3.bin", {2, 3, 15, 12}, DType::f32)), 0, 0));
}

}  // namespace
}  // namespace prism

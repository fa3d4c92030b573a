// patchify: against a naive index formula for several shapes (patch 1, patch S, S not a
// multiple of the patch, one channel), against PyTorch's reshape/permute of the same pixels,
// and as what it stands for: its rows times the conv weight are the stride-p convolution.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "test_util/eltwise.h"
#include "test_util/paths.h"

namespace prism {
namespace {

using test::all_close;
using test::random_f32;
using test::to_doubles;

// out[(v g + gy) g + gx][(ch p + ky) p + kx] = pixels[v][ch][gy p + ky][gx p + kx].
void expect_patches(const Tensor& got, const Tensor& pixels, int64_t p) {
  const int64_t v = pixels.size(0), c = pixels.size(1), s = pixels.size(2), g = s / p;
  ASSERT_EQ(got.shape(), Dims({v * g * g, c * p * p}));
  const float* px = pixels.data<float>();
  const float* out = got.data<float>();
  for (int64_t n = 0; n < v; ++n)
    for (int64_t gy = 0; gy < g; ++gy)
      for (int64_t gx = 0; gx < g; ++gx)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t ky = 0; ky < p; ++ky)
            for (int64_t kx = 0; kx < p; ++kx) {
              const int64_t row = (n * g + gy) * g + gx, col = (ch * p + ky) * p + kx;
              const float want = px[((n * c + ch) * s + gy * p + ky) * s + gx * p + kx];
              ASSERT_EQ(out[row * c * p * p + col], want) << "view " << n << " patch " << gy << "," << gx;
            }
}

TEST(PatchifyTest, MatchesTheIndexFormula) {
  struct Case {
    int64_t v, c, s, p;
  };
  for (const Case& k : {Case{1, 3, 32, 8}, Case{2, 3, 35, 8}, Case{3, 1, 7, 1}, Case{2, 2, 9, 9}, Case{1, 4, 30, 4}}) {
    const Tensor pixels = random_f32({k.v, k.c, k.s, k.s}, uint32_t(k.s * 10 + k.p));
    expect_patches(ops::patchify(pixels, k.p), pixels, k.p);
  }
}

// Many bands, so the work really is spread over the pool.
TEST(PatchifyTest, ManyViewsRunInParallel) {
  const Tensor pixels = random_f32({5, 3, 224, 224}, 11);
  expect_patches(ops::patchify(pixels, 16), pixels, 16);
}

TEST(PatchifyTest, NoViewsGivesNoRows) {
  EXPECT_EQ(ops::patchify(Tensor::empty({0, 3, 32, 32}, DType::f32), 8).shape(), Dims({0, 192}));
}

// op_reference.py's patchify case: PyTorch's own rows on its seeded pixels.
TEST(PatchifyTest, MatchesPyTorch) {
  const std::string dir = test::scratch_dir("patchify");
  ASSERT_TRUE(test::run_reference("op_reference.py", "patchify " + dir).ok());
  const Tensor x = test::read_bin(dir + "/x.bin", {2, 3, 35, 35}, DType::f32);
  const Tensor out = test::read_bin(dir + "/out.bin", {32, 192}, DType::f32);
  EXPECT_TRUE(all_close(ops::patchify(x, 8), to_doubles(out), 0.0, 0.0));
}

// The reason the op exists: patch rows @ weight[C_out, C p p]^T is conv2d(stride p) laid out
// [V, g, g, C_out] instead of [V, C_out, g, g].
TEST(PatchifyTest, RowsTimesConvWeightAreTheConvolution) {
  const int64_t v = 2, c = 3, s = 20, p = 5, g = s / p, c_out = 6;
  const Tensor pixels = random_f32({v, c, s, s}, 21);
  const Tensor weight = random_f32({c_out, c, p, p}, 22);
  const Tensor rows = ops::patchify(pixels, p);  // [V g g, C p p]
  const Tensor got = ops::matmul(rows, weight.view({c_out, c * p * p}), {.transpose_b = true});  // [V g g, C_out]
  const Tensor conv = ops::conv2d(pixels, weight, Tensor(), {.stride_h = int(p), .stride_w = int(p)});  // [V, C_out, g, g]
  std::vector<double> want;
  const std::vector<double> cv = to_doubles(conv);
  for (int64_t n = 0; n < v; ++n)
    for (int64_t y = 0; y < g; ++y)
      for (int64_t x = 0; x < g; ++x)
        for (int64_t o = 0; o < c_out; ++o) want.push_back(cv[((n * c_out + o) * g + y) * g + x]);
  EXPECT_TRUE(all_close(got, want, 1e-4, 1e-4));
}

TEST(PatchifyDeathTest, BadShapesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor square = random_f32({1, 3, 8, 8}, 31);
  EXPECT_DEATH(ops::patchify(random_f32({1, 3, 8, 6}, 32), 2), "pixels must be");
  EXPECT_DEATH(ops::patchify(random_f32({3, 8, 8}, 33), 2), "pixels must be");
  EXPECT_DEATH(ops::patchify(square, 0), "patch_size");
  EXPECT_DEATH(ops::patchify(square, 9), "patch_size");
}

}  // namespace
}  // namespace prism

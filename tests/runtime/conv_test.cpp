// conv1d and conv2d against a naive double-precision convolution (stride, padding, dilation,
// groups, bias or none, depthwise) and against PyTorch's F.conv1d / F.conv2d numbers.
#include <gtest/gtest.h>

#include "runtime/ops.h"
#include "test_util/eltwise.h"
#include "test_util/paths.h"

namespace prism {
namespace {

using test::all_close;
using test::random_f32;
using test::to_doubles;

struct Conv {  // 2-D form; conv1d is H = KH = 1
  int64_t n, c_in, h, w, c_out, kh, kw;
  int sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  bool bias = true;
  int64_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

std::vector<double> ref_conv(const Conv& c, const Tensor& x, const Tensor& wt, const Tensor& b) {
  const std::vector<double> xv = to_doubles(x), wv = to_doubles(wt);
  const std::vector<double> bv = b.defined() ? to_doubles(b) : std::vector<double>(c.c_out, 0.0);
  const int64_t cig = c.c_in / c.groups, cog = c.c_out / c.groups, oh = c.oh(), ow = c.ow();
  std::vector<double> out(c.n * c.c_out * oh * ow);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t o = 0; o < c.c_out; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double acc = bv[o];
          const int64_t g = o / cog;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t ky = 0; ky < c.kh; ++ky)
              for (int64_t kx = 0; kx < c.kw; ++kx) {
                const int64_t iy = y * c.sh - c.ph + ky * c.dh, ix = z * c.sw - c.pw + kx * c.dw;
                if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                acc += xv[((n * c.c_in + g * cig + ci) * c.h + iy) * c.w + ix] *
                       wv[((o * cig + ci) * c.kh + ky) * c.kw + kx];
              }
          out[((n * c.c_out + o) * oh + y) * ow + z] = acc;
        }
  return out;
}

TEST(ConvTest, Conv1dMatchesReference) {
  const Conv cases[] = {
      {.n = 2, .c_in = 6, .h = 1, .w = 37, .c_out = 8, .kh = 1, .kw = 5, .sw = 2, .pw = 3, .dw = 2, .groups = 2},
      {.n = 1, .c_in = 80, .h = 1, .w = 50, .c_out = 16, .kh = 1, .kw = 3, .pw = 1},          // Whisper conv1
      {.n = 1, .c_in = 16, .h = 1, .w = 25, .c_out = 16, .kh = 1, .kw = 3, .sw = 2, .pw = 1},  // Whisper conv2
      {.n = 3, .c_in = 4, .h = 1, .w = 1, .c_out = 5, .kh = 1, .kw = 1, .bias = false},
      {.n = 2, .c_in = 12, .h = 1, .w = 31, .c_out = 12, .kh = 1, .kw = 7, .pw = 3, .groups = 12},  // depthwise
  };
  uint32_t seed = 1;
  for (const Conv& c : cases) {
    const Tensor x = random_f32({c.n, c.c_in, c.w}, seed++, -1, 1);
    const Tensor w = random_f32({c.c_out, c.c_in / c.groups, c.kw}, seed++, -1, 1);
    const Tensor b = c.bias ? random_f32({c.c_out}, seed++) : Tensor();
    const Tensor y = ops::conv1d(x, w, b, {.stride = c.sw, .padding = c.pw, .dilation = c.dw, .groups = c.groups});
    EXPECT_EQ(y.shape(), Dims({c.n, c.c_out, c.ow()}));
    EXPECT_TRUE(all_close(y, ref_conv(c, x, w.unsqueeze(2), b), 1e-5, 1e-5)) << "case " << seed;
  }
}

TEST(ConvTest, Conv2dMatchesReference) {
  const Conv cases[] = {
      {.n = 2, .c_in = 4, .h = 11, .w = 9, .c_out = 6, .kh = 3, .kw = 2, .sh = 2, .ph = 1, .pw = 2, .dw = 2, .groups = 2},
      {.n = 1, .c_in = 3, .h = 32, .w = 48, .c_out = 8, .kh = 16, .kw = 16, .sh = 16, .sw = 16, .bias = false},  // patches
      {.n = 1, .c_in = 5, .h = 7, .w = 7, .c_out = 3, .kh = 3, .kw = 3, .ph = 1, .pw = 1, .dh = 2, .dw = 3},
      {.n = 2, .c_in = 8, .h = 9, .w = 10, .c_out = 8, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .groups = 8},
  };
  uint32_t seed = 100;
  for (const Conv& c : cases) {
    const Tensor x = random_f32({c.n, c.c_in, c.h, c.w}, seed++, -1, 1);
    const Tensor w = random_f32({c.c_out, c.c_in / c.groups, c.kh, c.kw}, seed++, -1, 1);
    const Tensor b = c.bias ? random_f32({c.c_out}, seed++) : Tensor();
    const Tensor y = ops::conv2d(x, w, b,
                                 {.stride_h = c.sh, .stride_w = c.sw, .padding_h = c.ph, .padding_w = c.pw,
                                  .dilation_h = c.dh, .dilation_w = c.dw, .groups = c.groups});
    EXPECT_EQ(y.shape(), Dims({c.n, c.c_out, c.oh(), c.ow()}));
    EXPECT_TRUE(all_close(y, ref_conv(c, x, w, b), 1e-5, 1e-5)) << "case " << seed;
  }
}

TEST(ConvTest, CachedPrimitiveRunsFromSeveralThreads) {
  const Tensor w = random_f32({8, 4, 3}, 7, -1, 1), b = random_f32({8}, 8);
  const Conv c{.n = 1, .c_in = 4, .h = 1, .w = 40, .c_out = 8, .kh = 1, .kw = 3, .pw = 1};
  std::vector<Tensor> xs, ys(8);
  for (int i = 0; i < 8; ++i) xs.push_back(random_f32({1, 4, 40}, 20 + i, -1, 1));
#pragma omp parallel for
  for (int i = 0; i < 8; ++i) ys[i] = ops::conv1d(xs[i], w, b, {.padding = 1});
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(all_close(ys[i], ref_conv(c, xs[i], w.unsqueeze(2), b), 1e-5, 1e-5));
}

// op_reference.py's conv cases: PyTorch's own outputs on its seeded inputs.
TEST(ConvTest, Conv1dMatchesPyTorch) {
  const std::string dir = test::scratch_dir("conv_conv1d");
  ASSERT_TRUE(test::run_reference("op_reference.py", "conv1d " + dir).ok());
  const Tensor x = test::read_bin(dir + "/x.bin", {2, 6, 37}, DType::f32);
  const Tensor w = test::read_bin(dir + "/w.bin", {8, 3, 5}, DType::f32);
  const Tensor b = test::read_bin(dir + "/b.bin", {8}, DType::f32);
  const Tensor out = test::read_bin(dir + "/out.bin", {2, 8, 18}, DType::f32);
  const Tensor y = ops::conv1d(x, w, b, {.stride = 2, .padding = 3, .dilation = 2, .groups = 2});
  EXPECT_TRUE(all_close(y, to_doubles(out), 1e-5, 1e-5));
}

TEST(ConvTest, Conv2dMatchesPyTorch) {
  const std::string dir = test::scratch_dir("conv_conv2d");
  ASSERT_TRUE(test::run_reference("op_reference.py", "conv2d " + dir).ok());
  const Tensor x = test::read_bin(dir + "/x.bin", {2, 4, 11, 9}, DType::f32);
  const Tensor w = test::read_bin(dir + "/w.bin", {6, 2, 3, 2}, DType::f32);
  const Tensor b = test::read_bin(dir + "/b.bin", {6}, DType::f32);
  const Tensor out = test::read_bin(dir + "/out.bin", {2, 6, 6, 11}, DType::f32);
  const Tensor y = ops::conv2d(x, w, b,
                               {.stride_h = 2, .stride_w = 1, .padding_h = 1, .padding_w = 2, .dilation_h = 1,
                                .dilation_w = 2, .groups = 2});
  EXPECT_TRUE(all_close(y, to_doubles(out), 1e-5, 1e-5));
}

TEST(ConvTest, PatchEmbeddingMatchesPyTorch) {
  const std::string dir = test::scratch_dir("conv_conv2d_patch");
  ASSERT_TRUE(test::run_reference("op_reference.py", "conv2d_patch " + dir).ok());
  const Tensor x = test::read_bin(dir + "/x.bin", {1, 3, 32, 32}, DType::f32);
  const Tensor w = test::read_bin(dir + "/w.bin", {8, 3, 16, 16}, DType::f32);
  const Tensor out = test::read_bin(dir + "/out.bin", {1, 8, 2, 2}, DType::f32);
  const Tensor y = ops::conv2d(x, w, Tensor(), {.stride_h = 16, .stride_w = 16});
  EXPECT_TRUE(all_close(y, to_doubles(out), 1e-5, 1e-4));
}

}  // namespace
}  // namespace prism

// Rotary embeddings: both styles against a naive double-precision rotation (full and partial
// rotary dims, a strided view of a fused QKV buffer), and against Hugging Face's own PyTorch
// code (Llama rotate_half, GPT-J rotate_every_two) through tests/reference/op_reference.py.
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

// x: [T, H, D] values (row-major); rotates the first `rotary` dims of each head. The angle is
// f32(pos) * inv_freq rounded to f32, as the op documents (and HF computes).
std::vector<double> ref_rope(const Tensor& x, const std::vector<int32_t>& pos, const Tensor& inv_freq,
                             int rotary, ops::RopeStyle style) {
  std::vector<double> v = to_doubles(x);
  const int64_t T = x.size(0), H = x.size(1), D = x.size(2), half = rotary / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double* row = v.data() + (t * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = float(float(pos[t]) * inv_freq.data<float>()[i]);
        const double c = std::cos(angle), s = std::sin(angle);
        const int64_t i0 = style == ops::RopeStyle::half ? i : 2 * i;
        const int64_t i1 = style == ops::RopeStyle::half ? i + half : 2 * i + 1;
        const double a = row[i0], b = row[i1];
        row[i0] = a * c - b * s;
        row[i1] = b * c + a * s;
      }
    }
  return v;
}

TEST(RopeTest, InvFreqFollowsTheta) {
  const Tensor f = ops::rope_inv_freq(128, 500000.0);
  ASSERT_EQ(f.shape(), Dims({64}));
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(f.data<float>()[i], std::pow(500000.0, -2.0 * i / 128), 3e-7 * f.data<float>()[i]);
}

TEST(RopeTest, TableHoldsCosAndSin) {
  const Tensor f = ops::rope_inv_freq(16, 10000.0);
  const ops::RopeTable t = ops::make_rope_table(f, 33);
  EXPECT_EQ(t.rotary_dim, 16);
  EXPECT_EQ(t.cos.shape(), Dims({33, 8}));
  for (int p : {0, 1, 32})
    for (int i = 0; i < 8; ++i) {
      const double angle = float(float(p) * f.data<float>()[i]);
      EXPECT_NEAR(t.cos.data<float>()[p * 8 + i], std::cos(angle), 1e-7);
      EXPECT_NEAR(t.sin.data<float>()[p * 8 + i], std::sin(angle), 1e-7);
    }
}

TEST(RopeTest, BothStylesMatchNaiveReference) {
  struct Case {
    int64_t T, H, D;
    int rotary;
  };
  for (ops::RopeStyle style : {ops::RopeStyle::half, ops::RopeStyle::interleaved})
    for (const Case& c : {Case{7, 3, 64, 64}, Case{1, 1, 2, 2}, Case{5, 2, 80, 32}, Case{3, 4, 128, 128},
                          Case{2, 3, 96, 40}, Case{64, 32, 64, 64}}) {
      const Tensor inv_freq = ops::rope_inv_freq(c.rotary, 10000.0);
      const ops::RopeTable table = ops::make_rope_table(inv_freq, 4096);
      std::vector<int32_t> pos;
      for (int64_t t = 0; t < c.T; ++t) pos.push_back(int32_t((t * 977 + 3) % 4096));
      Tensor x = random_f32({c.T, c.H, c.D}, 1);
      const std::vector<double> expected = ref_rope(x, pos, inv_freq, c.rotary, style);
      ops::apply_rope(x, Tensor::from<int32_t>(std::span<const int32_t>(pos), {c.T}), table, style);
      EXPECT_TRUE(all_close(x, expected, 1e-5, 1e-6))
          << (style == ops::RopeStyle::half ? "half " : "interleaved ") << c.T << "x" << c.H << "x" << c.D
          << " rotary " << c.rotary;
    }
}

TEST(RopeTest, RotatesAStridedViewOfFusedQkvInPlace) {
  // qkv: [T, 3 * H * D]; q is the [T, H, D] view of its first third (token stride 3 * H * D).
  const int64_t T = 5, H = 4, D = 64;
  Tensor qkv = random_f32({T, 3 * H * D}, 2);
  const std::vector<double> before = to_doubles(qkv);
  Tensor q = qkv.view({T, 3, H, D}).select(1, 0);
  ASSERT_EQ(q.stride(0), 3 * H * D);
  const Tensor inv_freq = ops::rope_inv_freq(D, 10000.0);
  const ops::RopeTable table = ops::make_rope_table(inv_freq, 64);
  const std::vector<int32_t> pos = {4, 0, 63, 9, 9};
  const std::vector<double> expected = ref_rope(q, pos, inv_freq, D, ops::RopeStyle::half);
  ops::apply_rope(q, Tensor::from<int32_t>(std::span<const int32_t>(pos), {T}), table, ops::RopeStyle::half);
  EXPECT_TRUE(all_close(q, expected, 1e-5, 1e-6));
  const std::vector<double> after = to_doubles(qkv);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = H * D; j < 3 * H * D; ++j) ASSERT_EQ(after[t * 3 * H * D + j], before[t * 3 * H * D + j]);
}

// Every half width from 1 to 33 (whole vectors and every masked tail: 8 or 16 lanes for the
// half style, 4 or 8 pairs for the interleaved one), exactly: on every tier each output is one
// fma over one rounded product, first' = fma(first, c, -(second s)), second' = fma(second, c,
// first s), with (first, second) = (x[i], x[i + half]) or (x[2i], x[2i + 1]). The dims past
// the rotary ones stay as they were.
TEST(RopeTest, EveryTailWidthIsExact) {
  for (ops::RopeStyle style : {ops::RopeStyle::half, ops::RopeStyle::interleaved})
    for (int64_t half = 1; half <= 33; ++half) {
      const int64_t T = 3, H = 2, D = 2 * half + 3;
      const ops::RopeTable table = ops::make_rope_table(ops::rope_inv_freq(int(2 * half), 10000.0), 64);
      const std::vector<int32_t> pos = {5, 0, 63};
      Tensor x = random_f32({T, H, D}, uint32_t(half));
      const std::vector<float> before(x.data<float>(), x.data<float>() + x.numel());
      ops::apply_rope(x, Tensor::from<int32_t>(std::span<const int32_t>(pos), {T}), table, style);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const float* in = before.data() + (t * H + h) * D;
          const float* out = x.data<float>() + (t * H + h) * D;
          const float* c = table.cos.data<float>() + pos[t] * half;
          const float* s = table.sin.data<float>() + pos[t] * half;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t i0 = style == ops::RopeStyle::half ? i : 2 * i;
            const int64_t i1 = style == ops::RopeStyle::half ? i + half : 2 * i + 1;
            ASSERT_EQ(out[i0], std::fma(in[i0], c[i], -(in[i1] * s[i]))) << half << " " << i;
            ASSERT_EQ(out[i1], std::fma(in[i1], c[i], in[i0] * s[i])) << half << " " << i;
          }
          for (int64_t i = 2 * half; i < D; ++i) ASSERT_EQ(out[i], in[i]) << half << " " << i;
        }
    }
}

// Runs a case of op_reference.py and applies our rope to its input with our own table.
void check_against_pytorch(const std::string& name, int64_t T, int64_t H, int64_t D, int rotary,
                           ops::RopeStyle style) {
  const std::string dir = test::scratch_dir("rope_" + name);
  ASSERT_TRUE(test::run_reference("op_reference.py", name + " " + dir).ok());
  Tensor x = test::read_bin(dir + "/x.bin", {T, H, D}, DType::f32);
  const Tensor pos = test::read_bin(dir + "/pos.bin", {T}, DType::i32);
  const Tensor torch_inv_freq = test::read_bin(dir + "/inv_freq.bin", {rotary / 2}, DType::f32);
  const Tensor out = test::read_bin(dir + "/out.bin", {T, H, D}, DType::f32);
  const Tensor inv_freq = ops::rope_inv_freq(rotary, 10000.0);
  // Same f32 steps as HF: at most an ulp apart from PyTorch's pow.
  EXPECT_TRUE(all_close(inv_freq, to_doubles(torch_inv_freq), 1.2e-7, 0));
  ops::apply_rope(x, pos, ops::make_rope_table(inv_freq, 4096), style);
  EXPECT_TRUE(all_close(x, to_doubles(out), 1e-5, 2e-5));
}

TEST(RopeTest, HalfMatchesPyTorchLlama) { check_against_pytorch("rope_half", 7, 3, 64, 64, ops::RopeStyle::half); }

TEST(RopeTest, InterleavedMatchesPyTorchGptj) {
  check_against_pytorch("rope_interleaved", 5, 2, 64, 32, ops::RopeStyle::interleaved);
}

TEST(RopeDeathTest, PositionOutsideTableAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ops::RopeTable table = ops::make_rope_table(ops::rope_inv_freq(8, 10000.0), 16);
  Tensor x = random_f32({1, 1, 8}, 3);
  EXPECT_DEATH(ops::apply_rope(x, Tensor::from<int32_t>({16}, {1}), table, ops::RopeStyle::half), "position");
}

}  // namespace
}  // namespace prism

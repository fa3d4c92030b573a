// ops::rms_norm_rope_ (QK-norm and rotary embedding in one pass): against a naive
// double-precision RMSNorm-then-rotation with a bound derived from the f32 steps, and bit for
// bit against rms_norm followed by apply_rope (what it replaces), both styles, full and
// partial rotary dims, on strided q/k views of a fused QKV buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>

#include "runtime/ops.h"
#include "test_util/eltwise.h"
#include "test_util/paths.h"

namespace prism {
namespace {

using test::random_f32;

struct Case {
  int64_t T, H, D;
  int rotary;
};

// x: [T, H, D]; rows normed in double with weight w, then the first `rotary` dims rotated by
// the table's (f32) cos/sin of each token's position. Also returns, per element, the scale
// the error bound is relative to: |a| + |b| of its rotated pair (|y| for unrotated dims).
void reference(const Tensor& x, const Tensor& w, float eps, const std::vector<int32_t>& pos,
               const ops::RopeTable& table, ops::RopeStyle style, std::vector<double>& out,
               std::vector<double>& scale) {
  const int64_t T = x.size(0), H = x.size(1), D = x.size(2), half = table.rotary_dim / 2;
  out.assign(size_t(T * H * D), 0.0);
  scale.assign(out.size(), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* row = x.data<float>() + t * x.stride(0) + h * x.stride(1);
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(row[i]) * double(row[i]);
      const double inv = 1.0 / std::sqrt(ss / double(D) + double(eps));
      double* y = out.data() + (t * H + h) * D;
      double* sc = scale.data() + (t * H + h) * D;
      for (int64_t i = 0; i < D; ++i) {
        y[i] = double(row[i]) * inv * double(w.data<float>()[i]);
        sc[i] = std::abs(y[i]);
      }
      for (int64_t i = 0; i < half; ++i) {
        const double c = table.cos.data<float>()[pos[t] * half + i], s = table.sin.data<float>()[pos[t] * half + i];
        const int64_t i0 = style == ops::RopeStyle::half ? i : 2 * i;
        const int64_t i1 = style == ops::RopeStyle::half ? i + half : 2 * i + 1;
        const double a = y[i0], b = y[i1];
        y[i0] = a * c - b * s;
        y[i1] = b * c + a * s;
        sc[i0] = sc[i1] = std::abs(a) + std::abs(b);
      }
    }
}

// A fused QKV buffer [T, 3 H, D] and its q view [T, H, D] (rows strided by 3 H D).
Tensor q_view(const Tensor& qkv, int64_t heads) { return qkv.slice(1, 0, heads); }

const Case kCases[] = {{7, 3, 64, 64}, {1, 1, 2, 2}, {5, 2, 80, 32}, {3, 4, 128, 128}, {2, 3, 96, 40},
                       {33, 30, 128, 128}, {4, 2, 20, 20}};

TEST(RmsNormRopeTest, MatchesNaiveReferenceWithinDerivedBound) {
  // NOTE: the bound. u = 2^-24. The f32 sum of D squares (kLanes-wide accumulators, then a
  // tree of log2(kLanes) adds) errs by at most (D / kLanes + log2 kLanes + 2) u relative,
  // at most 24 u for D <= 128 on the narrowest tier (AVX2, 8 lanes); the reciprocal square
  // root adds half that plus 2 u, the products x inv w 2 u: the normed y errs by <= 16 u |y|.
  // The rotation a c - b s (one fma over a rounded product, c and s exact inputs) adds 2 u
  // (|a| + |b|). So |got - ref| <= 18 u (|a| + |b|); 32 u is asserted.
  constexpr double kU = 1.0 / (1 << 24);
  const float eps = 1e-5f;
  for (ops::RopeStyle style : {ops::RopeStyle::half, ops::RopeStyle::interleaved})
    for (const Case& c : kCases) {
      const ops::RopeTable table = ops::make_rope_table(ops::rope_inv_freq(c.rotary, 256.0), 1024);
      std::vector<int32_t> pos;
      for (int64_t t = 0; t < c.T; ++t) pos.push_back(int32_t((t * 677 + 5) % 1024));
      Tensor qkv = random_f32({c.T, 3 * c.H, c.D}, 7);
      Tensor q = q_view(qkv, c.H);
      const Tensor w = random_f32({c.D}, 8);
      std::vector<double> expected, scale;
      reference(q, w, eps, pos, table, style, expected, scale);
      const Tensor k_before = qkv.slice(1, c.H, 3 * c.H).contiguous();
      ops::rms_norm_rope_(q, w, eps, Tensor::from<int32_t>(std::span<const int32_t>(pos), {c.T}), table, style);
      int bad = 0;
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t i = 0; i < c.D; ++i) {
            const size_t e = size_t((t * c.H + h) * c.D + i);
            const double got = q.data<float>()[t * q.stride(0) + h * q.stride(1) + i];
            if (!(std::abs(got - expected[e]) <= 32 * kU * scale[e] + 1e-30) && bad++ < 5)
              ADD_FAILURE() << c.T << "x" << c.H << "x" << c.D << " rotary " << c.rotary << " at (" << t << ", " << h
                            << ", " << i << "): " << got << " vs " << expected[e];
          }
      // Only the q heads were touched.
      EXPECT_EQ(std::memcmp(qkv.slice(1, c.H, 3 * c.H).contiguous().data<float>(), k_before.data<float>(),
                            size_t(k_before.numel()) * 4),
                0);
    }
}

TEST(RmsNormRopeTest, SameBitsAsRmsNormThenApplyRope) {
  const float eps = 1e-6f;
  for (ops::RopeStyle style : {ops::RopeStyle::half, ops::RopeStyle::interleaved})
    for (const Case& c : kCases) {
      const ops::RopeTable table = ops::make_rope_table(ops::rope_inv_freq(c.rotary, 10000.0), 4096);
      std::vector<int64_t> pos;
      for (int64_t t = 0; t < c.T; ++t) pos.push_back((t * 977 + 3) % 4096);
      const Tensor positions = Tensor::from<int64_t>(std::span<const int64_t>(pos), {c.T});
      Tensor qkv = random_f32({c.T, 3 * c.H, c.D}, 11);
      const Tensor w = random_f32({c.D}, 12);
      Tensor unfused = ops::rms_norm(q_view(qkv, c.H), w, eps);  // [T, H, D] contiguous
      ops::apply_rope(unfused, positions, table, style);
      Tensor q = q_view(qkv, c.H);
      ops::rms_norm_rope_(q, w, eps, positions, table, style);
      const Tensor got = q.contiguous();
      EXPECT_EQ(std::memcmp(got.data<float>(), unfused.data<float>(), size_t(got.numel()) * 4), 0)
          << c.T << "x" << c.H << "x" << c.D << " rotary " << c.rotary;
    }
}

// Z-Image's q/k path in PyTorch (tests/reference/op_reference.py rms_norm_rope: RMSNorm, then
// the interleaved pairs times exp(i angle) as complex numbers, in float64) on its inputs and
// cos/sin tables. The bound is the one derived above (32 u (|a| + |b|), |a|, |b| < 6 here),
// asserted as 1e-5 relative plus 2e-5 absolute.
TEST(RmsNormRopeTest, MatchesPyTorchZImageQkPath) {
  const int64_t T = 6, H = 3, D = 128, P = 64;
  const std::string dir = test::scratch_dir("rms_norm_rope");
  ASSERT_TRUE(test::run_reference("op_reference.py", "rms_norm_rope " + dir).ok());
  Tensor x = test::read_bin(dir + "/x.bin", {T, H, D}, DType::f32);
  const Tensor w = test::read_bin(dir + "/weight.bin", {D}, DType::f32);
  const Tensor pos = test::read_bin(dir + "/pos.bin", {T}, DType::i32);
  const ops::RopeTable table{test::read_bin(dir + "/cos.bin", {P, D / 2}, DType::f32),
                             test::read_bin(dir + "/sin.bin", {P, D / 2}, DType::f32), int(D)};
  const Tensor out = test::read_bin(dir + "/out.bin", {T, H, D}, DType::f32);
  ops::rms_norm_rope_(x, w, 1e-5f, pos, table, ops::RopeStyle::interleaved);
  EXPECT_TRUE(test::all_close(x, test::to_doubles(out), 1e-5, 2e-5));
}

}  // namespace
}  // namespace prism

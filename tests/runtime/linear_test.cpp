// ops::linear and pack_linear against a naive double-accumulated reference, in f32, bf16
// and int8, with each activation, with and without bias; the fused QuickGELU against linear
// then ops::quick_gelu; plus pack_linear's errors and the path each tier takes. Every test
// holds on every tier (the path differs: linear.cpp's NOTE table); run the binary with
// PRISM_ISA=avx2, =avx512 and unset.
// Tolerances are bounds derived from each precision's rounding (see tolerance()), the loosest
// path's: bf16 rounds x too on the native-bf16 tiers, not on the others.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/arena.h"
#include "runtime/cpu/linear_packed.h"
#include "runtime/isa.h"
#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism::ops {
namespace {

// Per-element error bound of y[m, n] before the activation. The activations' slopes are at
// most ~1.13 (GELU; SiLU and QuickGELU ~1.10) so the bound after it is 1.15x this.
//  f32:  brgemm sums K products in f32 in blocks; K * 2^-24 * S is the classic worst case
//        bound (S = sum |x w| + |b|); 2e-6 * S covers K <= 32 exactly and is loose beyond
//        (the error grows like sqrt(K) in practice), so use max(K * 2^-24, 2e-6) * S.
//  bf16: x and w are each rounded to 8 mantissa bits (rel err <= 2^-9), so each product is
//        off by <= ~2^-8 |x w|: bound 2^-8 * S, plus the f32 term. (The widen path of the
//        tiers without native bf16 rounds w only: 2^-9 S; the bound covers both.)
//  int8: x is off by <= sx/2 per element, w by <= sw[n]/2, so each product is off by
//        <= |x| sw/2 + |w| sx/2 + sx sw/4: bound (sw/2) sum|x| + (sx/2) sum|w| + K sx sw/4.
double tolerance(Precision p, const float* x, const float* w, int64_t K, double bias_abs) {
  double s = bias_abs, sum_x = 0, sum_w = 0, max_x = 0, max_w = 0;
  for (int64_t k = 0; k < K; ++k) {
    s += std::fabs(double(x[k]) * w[k]);
    sum_x += std::fabs(x[k]);
    sum_w += std::fabs(w[k]);
    max_x = std::max(max_x, double(std::fabs(x[k])));
    max_w = std::max(max_w, double(std::fabs(w[k])));
  }
  const double f32_bound = std::max(double(K) * std::ldexp(1.0, -24), 2e-6) * s;
  switch (p) {
    case Precision::f32: return f32_bound + 1e-7;
    case Precision::bf16: return std::ldexp(1.0, -8) * s + f32_bound + 1e-6;
    case Precision::int8: {
      const double sx = max_x / 127, sw = max_w / 127;
      return sw / 2 * sum_x + sx / 2 * sum_w + K * sx * sw / 4 + f32_bound + 1e-6;
    }
  }
  return 0;
}

// Checks linear(x, pack(w, b)) against the reference; x: [..., K] f32; w: [N, K] any float.
void check_linear(const Tensor& x, const Tensor& w, const Tensor& b, Precision p, Activation act) {
  SCOPED_TRACE(std::string(precision_name(p)) + " x" + x.shape().to_string() + " w" +
               w.shape().to_string() + (b.defined() ? " +bias" : "") + " act " + std::to_string(int(act)));
  Result<LinearWeight> packed = pack_linear(w, b, p);
  ASSERT_TRUE(packed.has_value()) << packed.status().to_string();
  Tensor y = linear(x, *packed, act);
  const int64_t N = w.size(0), K = w.size(1);
  Dims expect_shape = x.shape();
  expect_shape[expect_shape.size() - 1] = N;
  ASSERT_EQ(y.shape(), expect_shape);

  Tensor xc = x.contiguous();
  Tensor w32 = w.to(DType::f32);  // the values the checkpoint holds
  Tensor b32 = b.defined() ? b.to(DType::f32) : Tensor();
  const int64_t rows = xc.numel() / K;
  int bad = 0;
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = xc.data<float>() + m * K;
    for (int64_t n = 0; n < N; ++n) {
      const float* wr = w32.data<float>() + n * K;
      double acc = b32.defined() ? b32.data<float>()[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += double(xr[k]) * wr[k];
      const double ref = test::activation_reference(acc, act);
      const double tol = 1.15 * tolerance(p, xr, wr, K, b32.defined() ? std::fabs(b32.data<float>()[n]) : 0.0);
      const double got = y.data<float>()[m * N + n];
      if (!(std::fabs(got - ref) <= tol) && ++bad <= 5)
        ADD_FAILURE() << "y[" << m << ", " << n << "] = " << got << ", ref " << ref << ", tol " << tol;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(LinearTest, PrecisionNames) {
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    Result<Precision> parsed = parse_precision(precision_name(p));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_FALSE(parse_precision("fp8").has_value());
  EXPECT_EQ(parse_precision("").status().code(), StatusCode::invalid_argument);
}

TEST(LinearTest, PackLinearRejectsBadInput) {
  const Tensor w = test::random_f32({8, 4}, 1, -1.0f, 1.0f);
  EXPECT_EQ(pack_linear(Tensor(), Tensor(), Precision::f32).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(pack_linear(test::random_f32({8}, 1, -1.0f, 1.0f), Tensor(), Precision::f32).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(pack_linear(test::random_f32({2, 8, 4}, 1, -1.0f, 1.0f), Tensor(), Precision::f32).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(pack_linear(Tensor::zeros({8, 4}, DType::i32), Tensor(), Precision::f32).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(pack_linear(Tensor::zeros({0, 4}, DType::f32), Tensor(), Precision::f32).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(pack_linear(w, test::random_f32({4}, 2, -1.0f, 1.0f), Precision::bf16).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(pack_linear(w, test::random_f32({8, 1}, 2, -1.0f, 1.0f), Precision::int8).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(pack_linear(w, Tensor::zeros({8}, DType::i64), Precision::f32).status().code(),
            StatusCode::invalid_argument);
  Result<LinearWeight> ok = pack_linear(w, test::random_f32({8}, 2, -1.0f, 1.0f), Precision::int8);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->in_features, 4);
  EXPECT_EQ(ok->out_features, 8);
  EXPECT_TRUE(ok->has_bias);
  EXPECT_EQ(ok->precision, Precision::int8);
}

struct Shape {
  Dims x;     // [..., K]
  int64_t n;  // out features
};

const Shape kShapes[] = {
    {{1, 64}, 32},        // decode: one row
    {{7, 77}, 77},        // odd K and N
    {{33, 256}, 129},     // N not a multiple of the 64-wide blocks
    {{2, 5, 96}, 40},     // 3-D input
    {{300, 160}, 48},     // many rows: several M blocks across threads
};

void check_all(Precision p) {
  uint32_t seed = 10;
  for (const Shape& s : kShapes) {
    const int64_t K = s.x[s.x.size() - 1];
    const Tensor x = test::random_f32(s.x, seed++, -2.0f, 2.0f);
    const Tensor w = test::random_f32({s.n, K}, seed++, -0.3f, 0.3f);
    const Tensor b = test::random_f32({s.n}, seed++, -1.0f, 1.0f);
    for (Activation act : {Activation::none, Activation::gelu_erf, Activation::gelu_tanh,
                           Activation::silu, Activation::relu, Activation::quick_gelu}) {
      check_linear(x, w, Tensor(), p, act);
      check_linear(x, w, b, p, act);
    }
  }
}

TEST(LinearTest, F32MatchesReference) { check_all(Precision::f32); }
TEST(LinearTest, Bf16MatchesReference) { check_all(Precision::bf16); }
TEST(LinearTest, Int8MatchesReference) { check_all(Precision::int8); }

TEST(LinearTest, HalfPrecisionWeightsAndBias) {
  const Tensor x = test::random_f32({9, 70}, 3, -1.0f, 1.0f);
  const Tensor w = test::random_f32({50, 70}, 4, -0.5f, 0.5f);
  const Tensor b = test::random_f32({50}, 5, -1.0f, 1.0f);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    check_linear(x, w.to(DType::bf16), b.to(DType::bf16), p, Activation::silu);
    check_linear(x, w.to(DType::f16), b.to(DType::f16), p, Activation::gelu_erf);
  }
}

TEST(LinearTest, StridedRowsAndLeadingDims) {
  // A column slice of a wider tensor (row stride 2K), and a 3-D permuted view (copied).
  const Tensor wide = test::random_f32({12, 2 * 80}, 6, -1.0f, 1.0f);
  const Tensor w = test::random_f32({24, 80}, 7, -0.3f, 0.3f);
  const Tensor b = test::random_f32({24}, 8, -1.0f, 1.0f);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    check_linear(wide.slice(1, 80, 160), w, b, p, Activation::none);
    check_linear(wide.view({3, 4, 160}).slice(2, 0, 80), w, b, p, Activation::relu);
    check_linear(test::random_f32({4, 3, 80}, 9, -1.0f, 1.0f).transpose(0, 1), w, b, p, Activation::gelu_tanh);
  }
}

TEST(LinearTest, Int8EpilogueActivationsAreAccurate) {
  // The int8 path applies activations in its own vectorised epilogue: compare it with the
  // double-precision activation of its own pre-activation output, which isolates the
  // epilogue's error from the quantisation's. Inputs reach |v| ~ 12 (both tails).
  const Tensor x = test::random_f32({16, 64}, 11, -3.0f, 3.0f);
  const Tensor w = test::random_f32({100, 64}, 12, -0.4f, 0.4f);
  const Tensor b = test::random_f32({100}, 13, -4.0f, 4.0f);
  Result<LinearWeight> lw = pack_linear(w, b, Precision::int8);
  ASSERT_TRUE(lw.has_value());
  const Tensor pre = linear(x, *lw);
  for (Activation act : {Activation::gelu_erf, Activation::gelu_tanh, Activation::silu, Activation::relu,
                         Activation::quick_gelu}) {
    const Tensor y = linear(x, *lw, act);
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double v = pre.data<float>()[i];
      const double ref = test::activation_reference(v, act);
      ASSERT_NEAR(y.data<float>()[i], ref, 2e-6 * std::fabs(ref) + 1e-6 * (1 + std::fabs(v)))
          << "act " << int(act) << " at v = " << v;
    }
  }
}

TEST(LinearTest, FusedQuickGeluMatchesLinearThenQuickGelu) {
  // The fused form (oneDNN's swish post-op with alpha 1.702 in f32, and bf16 at large M on
  // native-bf16 tiers; our epilogues in int8, the small-M dpbf16 kernel and the widen kernel)
  // against linear then ops::quick_gelu, with the epilogue tolerance above. Rows 1 and 5 take
  // the small-M kernel in bf16 on the dpbf16 path, 300 oneDNN there; the widen path takes
  // both; N = 200 leaves a partial vector tail.
  // Pre-activations reach |v| ~ 12, both tails of the sigmoid.
  const Tensor w = test::random_f32({200, 96}, 17, -0.4f, 0.4f);
  const Tensor b = test::random_f32({200}, 18, -4.0f, 4.0f);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    Result<LinearWeight> lw = pack_linear(w, b, p);
    ASSERT_TRUE(lw.has_value()) << lw.status().to_string();
    for (int64_t rows : {1, 5, 300}) {
      SCOPED_TRACE(std::string(precision_name(p)) + " rows " + std::to_string(rows));
      const Tensor x = test::random_f32({rows, 96}, 19 + uint32_t(rows), -3.0f, 3.0f);
      const Tensor pre = linear(x, *lw);
      const Tensor unfused = quick_gelu(pre);
      const Tensor fused = linear(x, *lw, Activation::quick_gelu);
      ASSERT_EQ(fused.shape(), unfused.shape());
      int bad = 0;
      for (int64_t i = 0; i < fused.numel(); ++i) {
        const double v = pre.data<float>()[i], want = unfused.data<float>()[i];
        const double got = fused.data<float>()[i];
        if (!(std::fabs(got - want) <= 2e-6 * std::fabs(want) + 1e-6 * (1 + std::fabs(v))) && ++bad <= 5)
          ADD_FAILURE() << "at " << i << ": fused " << got << ", unfused " << want << ", v = " << v;
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST(LinearTest, OutputComesFromTheArenaAndRepeatsExactly) {
  const Tensor w = test::random_f32({64, 96}, 14, -1.0f, 1.0f);
  const Tensor x = test::random_f32({20, 96}, 15, -1.0f, 1.0f);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    Result<LinearWeight> lw = pack_linear(w, Tensor(), p);
    ASSERT_TRUE(lw.has_value());
    const Tensor first = linear(x, *lw, Activation::gelu_erf);
    Arena arena(1 << 20);
    {
      ArenaScope scope(&arena);
      const size_t before = arena.used_bytes();
      const Tensor y = linear(x, *lw, Activation::gelu_erf);
      EXPECT_GE(arena.used_bytes() - before, y.nbytes());
      // Same inputs, cached primitive: bitwise identical.
      EXPECT_EQ(std::memcmp(y.raw_data(), first.raw_data(), y.nbytes()), 0);
    }
  }
}

TEST(LinearTest, PathPerTier) {
  // linear.cpp's NOTE table, and what `prism info` prints for it.
  const Isa isa = active_isa();
  EXPECT_EQ(PackedLinear::default_path(Precision::f32), LinearPath::onednn);
  EXPECT_EQ(PackedLinear::default_path(Precision::bf16),
            isa >= Isa::avx512_bf16 ? LinearPath::onednn_dpbf16 : LinearPath::bf16_widen_onednn);
  EXPECT_EQ(PackedLinear::default_path(Precision::int8), isa >= Isa::avx512_bf16 ? LinearPath::onednn : LinearPath::int8_prism);
  const Tensor w = test::random_f32({24, 40}, 30, -1.0f, 1.0f);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    Result<LinearWeight> lw = pack_linear(w, Tensor(), p);
    ASSERT_TRUE(lw.has_value()) << precision_name(p) << ": " << lw.status().to_string();
    EXPECT_EQ(lw->packed->path(), PackedLinear::default_path(p));
    const std::string path = linear_path(p);
    EXPECT_EQ(path.rfind(std::string(isa_name(isa)) + ": ", 0), 0u) << path;
    EXPECT_EQ(path.find("none"), std::string::npos) << path;
  }
}

TEST(LinearTest, PathsRefuseWhatTheyCannotRun) {
  const Tensor w = test::random_f32({8, 8}, 31, -1.0f, 1.0f);
  EXPECT_EQ(PackedLinear::create(w, Tensor(), Precision::f32, LinearPath::bf16_widen).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(PackedLinear::create(w, Tensor(), Precision::int8, LinearPath::bf16_widen_onednn).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(PackedLinear::create(w, Tensor(), Precision::bf16, LinearPath::int8_prism).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(PackedLinear::create(w, Tensor(), Precision::int8, LinearPath::onednn_dpbf16).status().code(),
            StatusCode::invalid_argument);
  // The widen kernel, and oneDNN's f32 matmul for the widened blocks, exist on every tier.
  EXPECT_TRUE(PackedLinear::create(w, Tensor(), Precision::bf16, LinearPath::bf16_widen).has_value());
  EXPECT_TRUE(PackedLinear::create(w, Tensor(), Precision::bf16, LinearPath::bf16_widen_onednn).has_value());
}

TEST(LinearTest, Bf16PrefillSizesMatchReference) {
  // From kWidenedOnednnMinRows rows the bf16 path of the tiers without native bf16 widens the
  // panels for oneDNN's f32 matmul: a column block of y at the full row stride, a strided
  // source, an odd N (a partial panel), bias and an activation.
  const int64_t rows = kWidenedOnednnMinRows;
  const Tensor wide = test::random_f32({rows, 2 * 48}, 40, -2.0f, 2.0f);
  const Tensor w = test::random_f32({37, 48}, 41, -0.3f, 0.3f);
  const Tensor b = test::random_f32({37}, 42, -1.0f, 1.0f);
  check_linear(wide.slice(1, 0, 48), w, b, Precision::bf16, Activation::gelu_erf);
  check_linear(test::random_f32({rows, 48}, 43, -2.0f, 2.0f), w, Tensor(), Precision::bf16, Activation::none);
}

TEST(LinearTest, Bf16WidenedBlocksMatchTheWidenKernel) {
  // Weights whose f32 copy exceeds one block (16 MiB): y is written block by block. Both
  // paths multiply the same bf16 weights exactly and differ only in the f32 accumulation
  // order, so each is within K 2^-24 S of the exact sum (S <= sum|x| max|w| + |b|).
  const int64_t rows = kWidenedOnednnMinRows, K = 256, N = 16500;
  const Tensor x = test::random_f32({rows, K}, 44, -2.0f, 2.0f);
  const Tensor w = test::random_f32({N, K}, 45, -0.3f, 0.3f);
  const Tensor b = test::random_f32({N}, 46, -1.0f, 1.0f);
  auto widened = PackedLinear::create(w, b, Precision::bf16, LinearPath::bf16_widen_onednn);
  auto kernel = PackedLinear::create(w, b, Precision::bf16, LinearPath::bf16_widen);
  ASSERT_TRUE(widened.has_value() && kernel.has_value());
  std::vector<float> y1(size_t(rows * N)), y2(size_t(rows * N));
  (*widened)->run(x.data<float>(), rows, K, Activation::silu, y1.data());
  (*kernel)->run(x.data<float>(), rows, K, Activation::silu, y2.data());
  int bad = 0;
  for (int64_t m = 0; m < rows; ++m) {
    double sum_x = 0;
    for (int64_t k = 0; k < K; ++k) sum_x += std::fabs(x.data<float>()[m * K + k]);
    const double tol = 1.15 * 2 * K * std::ldexp(1.0, -24) * (sum_x * 0.3 + 1.0) + 1e-6;
    for (int64_t n = 0; n < N; ++n) {
      const float a = y1[size_t(m * N + n)], c = y2[size_t(m * N + n)];
      if (!(std::fabs(a - c) <= tol) && ++bad <= 5)
        ADD_FAILURE() << "y[" << m << ", " << n << "]: widened " << a << ", kernel " << c << ", tol " << tol;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(LinearTest, ZeroRowsAndZeroInput) {
  const Tensor w = test::random_f32({16, 32}, 16, -1.0f, 1.0f);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    Result<LinearWeight> lw = pack_linear(w, Tensor(), p);
    ASSERT_TRUE(lw.has_value());
    EXPECT_EQ(linear(Tensor::empty({0, 32}, DType::f32), *lw).shape(), Dims({0, 16}));
    const Tensor y = linear(Tensor::zeros({3, 32}, DType::f32), *lw);  // int8: scale of a zero row
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.data<float>()[i], 0.0f);
  }
}

}  // namespace
}  // namespace prism::ops

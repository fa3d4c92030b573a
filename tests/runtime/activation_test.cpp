// GELU (both forms), SiLU, QuickGELU and SwiGLU against double-precision formulas, densely over
// [-20, 20] (the tails are where approximations of erf and exp go wrong) and on odd shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism {
namespace {

using test::all_close;
using test::random_f32;
using test::to_doubles;

// Below ~1e-35 a float result is in or near the denormal range: judged in absolute terms.
constexpr double kRtol = 1e-5, kAtol = 1e-35;

double gelu_erf_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// 0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)): the same function, but 1 + tanh(u)
// cancels to 0 in double itself once u < -19, where the f32 result is still ~1e-17 x.
double gelu_tanh_ref(double x) {
  return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
// transformers' QuickGELUActivation: x * sigmoid(1.702 x), written as x / (1 + exp(-1.702 x)).
double quick_gelu_ref(double x) { return x / (1.0 + std::exp(-1.702 * x)); }

std::vector<double> map_ref(const Tensor& x, double (*f)(double)) {
  std::vector<double> v = to_doubles(x);
  for (double& e : v) e = f(e);
  return v;
}

Tensor sweep() {  // [-20, 20) in steps of 1/512, plus a few exact values
  std::vector<float> v;
  for (int i = -20 * 512; i < 20 * 512; ++i) v.push_back(float(i) / 512.0f);
  for (float e : {0.0f, -0.0f, 1e-20f, -1e-20f, 30.0f, -30.0f, 88.0f, -88.0f, 1e4f})
    v.push_back(e);
  return Tensor::from<float>(std::span<const float>(v), {int64_t(v.size())});
}

TEST(ActivationTest, GeluErfMatchesReference) {
  for (const Tensor& x : {sweep(), random_f32({3, 77}, 1), random_f32({1}, 2), random_f32({2, 3, 5}, 3)})
    EXPECT_TRUE(all_close(ops::gelu(x, ops::GeluForm::erf), map_ref(x, gelu_erf_ref), kRtol, kAtol))
        << x.to_string();
}

TEST(ActivationTest, GeluTanhMatchesReference) {
  for (const Tensor& x : {sweep(), random_f32({3, 77}, 4), random_f32({1}, 5)})
    EXPECT_TRUE(all_close(ops::gelu(x, ops::GeluForm::tanh), map_ref(x, gelu_tanh_ref), kRtol, kAtol))
        << x.to_string();
}

TEST(ActivationTest, SiluMatchesReference) {
  for (const Tensor& x : {sweep(), random_f32({3, 77}, 6), random_f32({1}, 7), random_f32({2, 3, 5}, 8)})
    EXPECT_TRUE(all_close(ops::silu(x), map_ref(x, silu_ref), kRtol, kAtol)) << x.to_string();
}

TEST(ActivationTest, QuickGeluMatchesReference) {
  for (const Tensor& x : {sweep(), random_f32({3, 77}, 11), random_f32({1}, 12), random_f32({2, 3, 5}, 13)})
    EXPECT_TRUE(all_close(ops::quick_gelu(x), map_ref(x, quick_gelu_ref), kRtol, kAtol)) << x.to_string();
  // Rows of a wider tensor (strided): the op reads them where they are.
  const Tensor half = random_f32({4, 40}, 14).slice(1, 0, 20);
  ASSERT_FALSE(half.is_contiguous());
  EXPECT_TRUE(all_close(ops::quick_gelu(half), map_ref(half, quick_gelu_ref), kRtol, kAtol));
}

TEST(ActivationTest, SwigluMatchesReference) {
  for (const Dims& shape : {Dims{3, 77}, Dims{1, 1}, Dims{64, 1100}}) {
    const Tensor gate = random_f32(shape, 9, -10.0f, 10.0f), up = random_f32(shape, 10);
    std::vector<double> expected = map_ref(gate, silu_ref);
    const std::vector<double> u = to_doubles(up);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] *= u[i];
    EXPECT_TRUE(all_close(ops::swiglu(gate, up), expected, kRtol, kAtol)) << shape.to_string();
  }
}

// The gate and up halves of a fused [T, 2I] projection: strided rows, no copy first.
TEST(ActivationTest, SwigluOnHalvesOfAFusedProjectionMatchesContiguous) {
  const Tensor fused = random_f32({7, 2 * 37}, 3);
  const Tensor gate = fused.slice(1, 0, 37), up = fused.slice(1, 37, 74);
  ASSERT_FALSE(gate.is_contiguous());
  const Tensor got = ops::swiglu(gate, up);
  const Tensor want = ops::swiglu(gate.contiguous(), up.contiguous());
  EXPECT_EQ(to_doubles(got), to_doubles(want));
}

TEST(ActivationTest, NanPropagates) {
  const Tensor x = Tensor::from<float>({NAN, 1.0f}, {2});
  EXPECT_TRUE(std::isnan(ops::gelu(x).data<float>()[0]));
  EXPECT_TRUE(std::isnan(ops::gelu(x, ops::GeluForm::tanh).data<float>()[0]));
  EXPECT_TRUE(std::isnan(ops::silu(x).data<float>()[0]));
  EXPECT_TRUE(std::isnan(ops::quick_gelu(x).data<float>()[0]));
}

// Every length from 1 to 33: whole vectors of 8 (AVX2) and 16 (AVX-512) lanes and every
// masked tail, each element against the reference, so a lane the tail mishandles shows.
TEST(ActivationTest, EveryTailLengthMatchesReference) {
  for (int64_t n = 1; n <= 33; ++n) {
    const Tensor x = random_f32({n}, uint32_t(100 + n), -12.0f, 12.0f);
    EXPECT_TRUE(all_close(ops::gelu(x, ops::GeluForm::erf), map_ref(x, gelu_erf_ref), kRtol, kAtol)) << n;
    EXPECT_TRUE(all_close(ops::gelu(x, ops::GeluForm::tanh), map_ref(x, gelu_tanh_ref), kRtol, kAtol)) << n;
    EXPECT_TRUE(all_close(ops::silu(x), map_ref(x, silu_ref), kRtol, kAtol)) << n;
    EXPECT_TRUE(all_close(ops::quick_gelu(x), map_ref(x, quick_gelu_ref), kRtol, kAtol)) << n;
    const Tensor up = random_f32({n}, uint32_t(200 + n));
    std::vector<double> expected = map_ref(x, silu_ref);
    const std::vector<double> u = to_doubles(up);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] *= u[i];
    EXPECT_TRUE(all_close(ops::swiglu(x, up), expected, kRtol, kAtol)) << n;
  }
}

// NaN in, NaN out, and +inf in, +inf out (the activations promise both), in every lane of a
// whole vector and of a tail.
TEST(ActivationTest, NanAndInfinityInEveryLane) {
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 31, 33}) {
    for (int64_t at = 0; at < n; ++at) {
      Tensor x = random_f32({n}, uint32_t(n));
      x.data<float>()[at] = NAN;
      if (at + 1 < n) x.data<float>()[at + 1] = INFINITY;
      for (const Tensor& y : {ops::gelu(x), ops::gelu(x, ops::GeluForm::tanh), ops::silu(x), ops::quick_gelu(x)}) {
        ASSERT_TRUE(std::isnan(y.data<float>()[at])) << n << " " << at;
        if (at + 1 < n) {
          ASSERT_EQ(y.data<float>()[at + 1], INFINITY) << n << " " << at;
        }
        for (int64_t i = 0; i < n; ++i) {  // the other lanes are untouched by their neighbours
          if (i != at && i != at + 1) {
            ASSERT_TRUE(std::isfinite(y.data<float>()[i])) << n << " " << at;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace prism

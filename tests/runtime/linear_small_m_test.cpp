// The dpbf16 small-M bf16 linear kernel (runtime/cpu/kernels/linear_bf16_dot.cpp, the
// onednn_dpbf16 path of the AVX512_BF16 tiers) against oneDNN's path on the same packed
// weights: every row count it takes (1..16), shapes with K and N off the 16/64 blocks
// (padding), a strided x, bias or none, each activation. Both paths round x and W to bf16 the
// same way and accumulate in f32, so they differ only by summation order: the bound per
// element is the f32 accumulation bound max(K 2^-24, 2e-6) * sum|x w| plus a few ulp for the
// activation forms (oneDNN's post-op vs vec_math). ops::linear itself (which dispatches by
// rows) is checked against a double reference in linear_test. On tiers without AVX512_BF16
// the kernel does not exist: these tests skip there, and bf16 takes the widen kernel
// (linear_kernels_test).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/cpu/linear_packed.h"
#include "runtime/isa.h"
#include "runtime/ops.h"

namespace prism::ops {
namespace {

Tensor random_tensor(const Dims& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// Skips a test on tiers whose bf16 path is not onednn_dpbf16.
#define SKIP_WITHOUT_DPBF16()                                                                        \
  if (PackedLinear::default_path(Precision::bf16) != LinearPath::onednn_dpbf16)                     \
  GTEST_SKIP() << "the " << isa_name(active_isa())                                                   \
               << " tier has no AVX512_BF16: bf16 takes the widen kernel there (linear_kernels_test)"

struct Case {
  int64_t k, n;
  bool bias;
  Activation act;
};

void check_case(const Case& c, int64_t rows, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  const Tensor w = random_tensor({c.n, c.k}, rng);
  const Tensor b = c.bias ? random_tensor({c.n}, rng) : Tensor();
  const Tensor x = random_tensor({rows, ld}, rng, -2.0f, 2.0f);
  Result<LinearWeight> lw = pack_linear(w, b, Precision::bf16);
  ASSERT_TRUE(lw.has_value());
  const PackedLinear& packed = *lw->packed;
  ASSERT_TRUE(packed.has_small_m()) << "oneDNN chose a layout the kernel does not know";
  std::vector<float> mine(size_t(rows * c.n), NAN), theirs(size_t(rows * c.n), NAN);
  packed.run_small_m(x.data<float>(), rows, ld, c.act, mine.data());
  packed.run_onednn(x.data<float>(), rows, ld, c.act, theirs.data());
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = c.bias ? std::fabs(b.data<float>()[j]) : 0.0;
      for (int64_t k = 0; k < c.k; ++k)
        s += std::fabs(double(round_bf16(x.data<float>()[m * ld + k])) * round_bf16(w.data<float>()[j * c.k + k]));
      const double bound = 1.15 * std::max(double(c.k) * std::ldexp(1.0, -24), 2e-6) * s + 1e-6 * std::fabs(theirs[m * c.n + j]) + 1e-6;
      const float got = mine[size_t(m * c.n + j)], want = theirs[size_t(m * c.n + j)];
      ASSERT_LE(std::fabs(got - want), bound) << "K " << c.k << " N " << c.n << " rows " << rows << " at (" << m
                                              << ", " << j << "): " << got << " vs " << want;
    }
}

TEST(LinearSmallMTest, MatchesOnednnEveryRowCount) {
  SKIP_WITHOUT_DPBF16();
  const Case shapes[] = {
      {64, 48, true, Activation::none},       // one group, N padded to 64
      {100, 37, false, Activation::none},     // K padded to 128, N to 64
      {960, 200, true, Activation::silu},     // several groups, a partial last panel
      {256, 1000, false, Activation::gelu_erf},
      {1024, 320, true, Activation::none},
  };
  uint32_t seed = 1;
  for (const Case& c : shapes)
    for (int64_t rows = 1; rows <= 16; ++rows) check_case(c, rows, c.k, seed++);
}

TEST(LinearSmallMTest, StridedRowsAndEveryActivation) {
  SKIP_WITHOUT_DPBF16();
  uint32_t seed = 100;
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::silu})
    for (int64_t rows : {1, 3, 8}) check_case({192, 144, true, act}, rows, 192 + 40, seed++);
}

TEST(LinearSmallMTest, OpsLinearTakesItAtSmallM) {
  SKIP_WITHOUT_DPBF16();
  // ops::linear at rows <= kSmallMMaxRows must give the kernel's result bit for bit, and
  // above it oneDNN's.
  std::mt19937 rng(7);
  const Tensor w = random_tensor({300, 512}, rng), b = random_tensor({300}, rng);
  const LinearWeight lw = *pack_linear(w, b, Precision::bf16);
  for (int64_t rows : {int64_t(1), cpu::kSmallMMaxRows, cpu::kSmallMMaxRows + 1}) {
    const Tensor x = random_tensor({rows, 512}, rng);
    const Tensor y = linear(x, lw, Activation::silu);
    std::vector<float> want(size_t(rows * 300));
    if (rows <= cpu::kSmallMMaxRows) lw.packed->run_small_m(x.data<float>(), rows, 512, Activation::silu, want.data());
    else lw.packed->run_onednn(x.data<float>(), rows, 512, Activation::silu, want.data());
    for (int64_t i = 0; i < rows * 300; ++i) ASSERT_EQ(y.data<float>()[i], want[size_t(i)]) << rows << " " << i;
  }
}

TEST(LinearSmallMTest, OnlyBf16OnTheDpbf16PathHasIt) {
  std::mt19937 rng(8);
  const Tensor w = random_tensor({64, 64}, rng);
  const bool dpbf16 = PackedLinear::default_path(Precision::bf16) == LinearPath::onednn_dpbf16;
  EXPECT_EQ(pack_linear(w, Tensor(), Precision::bf16)->packed->has_small_m(), dpbf16) << isa_name(active_isa());
  EXPECT_FALSE(pack_linear(w, Tensor(), Precision::f32)->packed->has_small_m());
  EXPECT_FALSE(pack_linear(w, Tensor(), Precision::int8)->packed->has_small_m());
}

TEST(LinearSmallMTest, Dpbf16PathIsRefusedWithoutTheKernel) {
  if (PackedLinear::default_path(Precision::bf16) == LinearPath::onednn_dpbf16)
    GTEST_SKIP() << "the " << isa_name(active_isa()) << " tier has the kernel";
  std::mt19937 rng(9);
  const Tensor w = random_tensor({32, 32}, rng);
  Result<std::shared_ptr<PackedLinear>> p = PackedLinear::create(w, Tensor(), Precision::bf16, LinearPath::onednn_dpbf16);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().code(), StatusCode::failed_precondition);
}

}  // namespace
}  // namespace prism::ops

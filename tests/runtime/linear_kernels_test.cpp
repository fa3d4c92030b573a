// The tier kernels behind ops::linear (runtime/cpu/linear_kernels.h) on the active tier (run
// the binary with PRISM_ISA=avx2, =avx512 and unset to cover each): the row passes (bf16
// rounding, s8 quantisation, the int8 epilogue) against their scalar definitions, and the
// bf16 widen kernel against a double-precision reference.
// NOTE (widen bound): the kernel multiplies the packed bf16 weights (exactly, once widened)
// by the f32 activations (exactly) and accumulates in f32, so its only error is rounding:
// at most n roundings of a partial sum each bounded by sum_k |x_k w_k| + |b| = S, with n = K
// FMAs + one add per K chunk (partial sums cross chunks through y) + the bias add: |err| <=
// gamma_n S, gamma_n = n u / (1 - n u), u = 2^-24. The activations' slopes are below 1.15,
// and their own vector forms are within ~1e-6 relative of the double functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/linear_kernels.h"
#include "runtime/isa.h"
#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism::cpu {
namespace {

using ops::Activation;


std::vector<float> random_floats(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::string tier() { return std::string(isa_name(active_isa())); }

// ---- row kernels ----

TEST(LinearRowKernelsTest, ToBf16RoundsToNearestEven) {
  std::vector<float> x = random_floats(1000, 1, -1e4f, 1e4f);
  auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  // Exact ties both ways, the largest finite values, infinities, NaNs, denormals.
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0xff7fffffu,
                     0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0x00000001u, 0x80400000u, 0x00018000u})
    x.push_back(from_bits(u));
  x.push_back(0.0f);
  x.push_back(-0.0f);
  const bool flushes_denormals = active_isa() >= Isa::avx512_bf16;  // vcvtneps2bf16 does
  for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(7), int64_t(15), int64_t(17), int64_t(33)}) {
    const int64_t off = int64_t(x.size()) - n;  // the special values sit at the end
    std::vector<bf16> out(size_t(n) + 1, bf16{0xabcd});
    linear_row_kernels().to_bf16(x.data() + off, n, out.data());
    EXPECT_EQ(out[size_t(n)].bits, 0xabcd) << "wrote past the end at n = " << n;
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[size_t(off + i)];
      const bf16 want = f32_to_bf16(v);
      const uint16_t got = out[size_t(i)].bits;
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(bf16_to_f32(out[size_t(i)]))) << tier() << " at " << i;
      } else if (flushes_denormals && std::fpclassify(v) == FP_SUBNORMAL) {
        EXPECT_TRUE(got == want.bits || (got & 0x7fff) == 0) << tier() << " denormal at " << i;
      } else {
        EXPECT_EQ(got, want.bits) << tier() << " x = " << v << " at " << i;
      }
    }
  }
}

TEST(LinearRowKernelsTest, QuantizeS8MatchesItsDefinition) {
  for (int64_t k = 1; k <= 70; ++k) {
    std::vector<float> x = random_floats(k, uint32_t(k), -3.0f, 3.0f);
    std::vector<int8_t> q(size_t(k) + 1, int8_t(99));
    const float scale = linear_row_kernels().quantize_s8(x.data(), k, q.data());
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    EXPECT_EQ(scale, amax / 127.0f) << "k " << k;
    EXPECT_EQ(q[size_t(k)], 99) << "wrote past the end at k = " << k;
    const float inv = 127.0f / amax;
    for (int64_t i = 0; i < k; ++i)
      ASSERT_EQ(q[size_t(i)], int8_t(std::nearbyint(x[size_t(i)] * inv))) << "k " << k << " at " << i;
  }
  std::vector<float> zeros(40, 0.0f);
  std::vector<int8_t> q(40, 5);
  EXPECT_EQ(linear_row_kernels().quantize_s8(zeros.data(), 40, q.data()), 1.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
}

TEST(LinearRowKernelsTest, Int8EpilogueMatchesItsDefinition) {
  const int64_t rows = 5;
  for (int64_t n : {1, 8, 16, 37, 64, 100}) {
    const std::vector<float> y0 = random_floats(rows * n, uint32_t(n), -3.0f, 3.0f);
    const std::vector<float> sx = random_floats(rows, 2, 0.5f, 4.0f);
    const std::vector<float> bias = random_floats(n, 3, -4.0f, 4.0f);
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                           Activation::silu, Activation::quick_gelu})
      for (bool with_bias : {false, true}) {
        std::vector<float> y = y0;
        // Rows 1..4 only: row 0 must stay untouched.
        linear_row_kernels().int8_epilogue(y.data(), 1, rows, n, sx.data(), with_bias ? bias.data() : nullptr, act);
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(y[size_t(j)], y0[size_t(j)]);
        for (int64_t m = 1; m < rows; ++m)
          for (int64_t j = 0; j < n; ++j) {
            const double v = double(y0[size_t(m * n + j)]) * sx[size_t(m)] + (with_bias ? bias[size_t(j)] : 0.0);
            const double ref = test::activation_reference(v, act);
            // v is rounded once (u |v|), then the activation (slope < 1.15, own error ~1e-6).
            ASSERT_NEAR(y[size_t(m * n + j)], ref, 1.15 * std::ldexp(std::fabs(v), -24) + 2e-6 * std::fabs(ref) + 1e-30)
                << tier() << " n " << n << " act " << int(act) << " at (" << m << ", " << j << ")";
          }
      }
  }
}

// ---- bf16 widen kernel ----

struct WidenCase {
  int64_t k, n;
};

// y = act(x @ W^T + b) through the active tier's widen kernel vs the double reference on the
// bf16-rounded weights; ld >= k is x's row stride.
void check_widen(const WidenCase& c, int64_t rows, int64_t ld, bool with_bias, Activation act, uint32_t seed) {
  SCOPED_TRACE(tier() + " K " + std::to_string(c.k) + " N " + std::to_string(c.n) + " rows " + std::to_string(rows) +
               " ld " + std::to_string(ld) + (with_bias ? " +bias" : "") + " act " + std::to_string(int(act)));
  const std::vector<float> w32 = random_floats(c.n * c.k, seed, -1.0f, 1.0f);
  const std::vector<float> x = random_floats(rows * ld, seed + 1, -2.0f, 2.0f);
  const std::vector<float> bias = random_floats(c.n, seed + 2, -1.0f, 1.0f);
  std::vector<bf16> w(w32.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(w32[i]);

  const Bf16WidenKernels& kernels = bf16_widen_kernels();
  const Bf16WidenWeights packed = pack_bf16_widen(w.data(), c.n, c.k, kernels.panel_width);
  // One extra row of guard values: nothing may be written past y.
  std::vector<float> y(size_t((rows + 1) * c.n), NAN);
  kernels.gemm(x.data(), rows, ld, packed, with_bias ? bias.data() : nullptr, act, y.data());

  const double u = std::ldexp(1.0, -24);
  const double n_round = double(c.k + (c.k + 255) / 256 + 1);
  const double gamma = n_round * u / (1 - n_round * u);
  int bad = 0;
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = with_bias ? bias[size_t(j)] : 0.0, s = with_bias ? std::fabs(bias[size_t(j)]) : 0.0;
      for (int64_t k = 0; k < c.k; ++k) {
        const double p = double(x[size_t(m * ld + k)]) * double(bf16_to_f32(w[size_t(j * c.k + k)]));
        acc += p;
        s += std::fabs(p);
      }
      const double ref = test::activation_reference(acc, act);
      const double bound = 1.15 * gamma * s + 2e-6 * std::fabs(ref) + 1e-30;
      const double got = y[size_t(m * c.n + j)];
      if (!(std::fabs(got - ref) <= bound) && ++bad <= 5)
        ADD_FAILURE() << "y[" << m << ", " << j << "] = " << got << ", ref " << ref << ", bound " << bound;
    }
  EXPECT_EQ(bad, 0);
  for (int64_t j = 0; j < c.n; ++j) ASSERT_TRUE(std::isnan(y[size_t(rows * c.n + j)])) << "wrote past y";
}

TEST(Bf16WidenTest, PanelWidthIsTwoVectors) {
  EXPECT_EQ(bf16_widen_kernels().panel_width, active_isa() == Isa::avx2 ? 16 : 32) << tier();
}

TEST(Bf16WidenTest, PackLaysOutInterleavedPanels) {
  // Column c of panel p at position 2 (c % (P/2)) + c / (P/2) of each k row; zero padding.
  const int64_t n = 37, k = 5;
  std::vector<bf16> w(size_t(n * k));
  for (int64_t i = 0; i < n * k; ++i) w[size_t(i)] = bf16{uint16_t(i + 1)};
  const int P = bf16_widen_kernels().panel_width;
  const Bf16WidenWeights packed = pack_bf16_widen(w.data(), n, k, P);
  ASSERT_EQ(packed.panels, (n + P - 1) / P);
  for (int64_t p = 0; p < packed.panels; ++p)
    for (int64_t j = 0; j < k; ++j)
      for (int c = 0; c < P; ++c) {
        const int64_t col = p * P + c;
        const uint16_t got = packed.data[(p * k + j) * P + 2 * (c % (P / 2)) + c / (P / 2)].bits;
        ASSERT_EQ(got, col < n ? uint16_t(col * k + j + 1) : uint16_t(0)) << "panel " << p << " k " << j << " c " << c;
      }
}

TEST(Bf16WidenTest, EveryRowCountMatchesReference) {
  // K and N off every block (N partial panels, K chunks of 256 with a tail), decode to prefill.
  const WidenCase shapes[] = {{7, 5}, {100, 37}, {333, 70}, {600, 129}};
  std::vector<int64_t> row_counts;
  for (int64_t m = 1; m <= 20; ++m) row_counts.push_back(m);
  for (int64_t m : {31, 64, 100, 257}) row_counts.push_back(m);
  uint32_t seed = 1;
  for (const WidenCase& c : shapes)
    for (int64_t rows : row_counts) {
      check_widen(c, rows, c.k, true, Activation::none, seed);
      seed += 3;
    }
}

TEST(Bf16WidenTest, BiasActivationsAndStridedRows) {
  uint32_t seed = 500;
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                         Activation::silu, Activation::quick_gelu})
    for (bool with_bias : {false, true})
      for (int64_t rows : {1, 3, 8, 13, 100}) {
        check_widen({192, 150}, rows, 192 + 40, with_bias, act, seed);
        seed += 3;
      }
}

TEST(Bf16WidenTest, LargeKAndNAcrossThreadsAndBlocks) {
  // Several K chunks, several row blocks (> 96 rows), panel groups split across threads.
  check_widen({2100, 700}, 200, 2100, true, Activation::silu, 900);
  check_widen({4096, 96}, 2, 4096, false, Activation::none, 901);
  check_widen({64, 3000}, 1, 64, true, Activation::gelu_tanh, 902);
}

TEST(Bf16WidenTest, ZeroWeightsGiveTheBias) {
  const int64_t n = 45, k = 33;
  std::vector<bf16> w(size_t(n * k), bf16{0});
  const std::vector<float> bias = random_floats(n, 7, -1.0f, 1.0f);
  const std::vector<float> x = random_floats(3 * k, 8, -1.0f, 1.0f);
  const Bf16WidenWeights packed = pack_bf16_widen(w.data(), n, k, bf16_widen_kernels().panel_width);
  std::vector<float> y(size_t(3 * n));
  bf16_widen_kernels().gemm(x.data(), 3, k, packed, bias.data(), Activation::none, y.data());
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(y[size_t(m * n + j)], bias[size_t(j)]);
}

}  // namespace
}  // namespace prism::cpu

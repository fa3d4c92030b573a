// ops::attention at AttentionPrecision::bf16. On tiers with native bf16 (avx512_bf16, amx)
// against a double softmax(Q' K'^T * scale) V' of the bf16-rounded inputs Q', K', V', with a
// per-element bound for what stays: P rounded to bf16 and f32 scores and sums. On the other
// tiers (avx2, avx512) the request must give the f32 path's bits. Mixed-length flat batches
// (several query chunks per sequence, one query, more keys than queries, an empty sequence,
// padding), grouped-query heads, head dims 64 and 128. Run once per tier (PRISM_ISA).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/isa.h"
#include "runtime/ops.h"
#include "test_util/attention.h"

namespace prism {
namespace {

using test::AttentionCase;

// NOTE: tolerance. With Q', K', V' the bf16 roundings of the inputs and p the exact softmax
// of their scores, the path computes o = sum_j bf16(e_j) v'_j / sum_j e_j, e_j = exp(s_j - max)
// in f32. Rounding to nearest bf16 moves each e_j by at most u = 2^-8 of itself, so o moves by
// at most u * sum_j p_j |v'_j| -- the reference attention of Q', K' and |V'|, computed
// per element. The f32 arithmetic (D-term scores, exp, the n-term sums, oneDNN's f32
// accumulation of P V) adds a few 1e-6 of an output of size <= 1 at these lengths; kF32Slack
// covers it with room.
constexpr double kU = 1.0 / 256.0;
constexpr double kF32Slack = 2e-5;

Tensor i32(const std::vector<int32_t>& v) {
  return Tensor::from<int32_t>(std::span<const int32_t>(v), {int64_t(v.size())});
}

AttentionCase make_case(const std::vector<std::pair<int, int>>& lens) {
  AttentionCase c;
  c.causal = false;
  c.cu_q = {0};
  c.cu_k = {0};
  for (auto [ql, kl] : lens) {
    c.cu_q.push_back(c.cu_q.back() + ql);
    c.cu_k.push_back(c.cu_k.back() + kl);
  }
  return c;
}

// x rounded to bf16 (nearest even) and back, elementwise; abs: |that| instead.
Tensor bf16_round(const Tensor& x, bool abs) {
  Tensor y = x.contiguous().clone();
  float* p = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    const float r = bf16_to_f32(f32_to_bf16(p[i]));
    p[i] = abs ? std::fabs(r) : r;
  }
  return y;
}

bool native_bf16() { return active_isa() >= Isa::avx512_bf16; }

void check_case(const AttentionCase& c, int hq, int hkv, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  const Tensor q = test::random_tensor({c.cu_q.back(), hq, d}, rng);
  const Tensor k = test::random_tensor({c.cu_k.back(), hkv, d}, rng);
  const Tensor v = test::random_tensor({c.cu_k.back(), hkv, d}, rng);
  const ops::AttentionSeqs seqs{i32(c.cu_q), i32(c.cu_k), c.kv_lens.empty() ? Tensor() : i32(c.kv_lens)};
  const Tensor out =
      ops::attention(q, k, v, seqs, {.scale = c.scale, .causal = false, .precision = ops::AttentionPrecision::bf16});
  ASSERT_EQ(out.shape(), Dims({c.cu_q.back(), hq, d}));
  if (!native_bf16()) {
    const Tensor f32 = ops::attention(q, k, v, seqs, {.scale = c.scale, .causal = false});
    EXPECT_EQ(std::memcmp(out.raw_data(), f32.raw_data(), size_t(out.numel()) * sizeof(float)), 0)
        << "without native bf16 the request must run the f32 kernel";
    return;
  }
  const Tensor qr = bf16_round(q, false), kr = bf16_round(k, false);
  const std::vector<double> want = test::reference_attention(qr, kr, bf16_round(v, false), c);
  const std::vector<double> weight = test::reference_attention(qr, kr, bf16_round(v, true), c);  // sum p |v'|
  const float* got = out.data<float>();
  double worst = 0, max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    worst = std::max(worst, err / (kU * weight[i] + kF32Slack));
    max_err = std::max(max_err, err);
  }
  EXPECT_LE(worst, 1.0) << "hq " << hq << " hkv " << hkv << " d " << d;
  // A sanity line for the record: the largest absolute error, against outputs of ~0.05.
  std::printf("bf16 attention d %d hq %d hkv %d: max |err| %.3g, %.2f of the bound\n", d, hq, hkv, max_err, worst);
}

class AttentionBf16Test : public ::testing::TestWithParam<int> {};

// Sequences of 300 and 530 queries take several chunks; one query; more keys than queries;
// an empty sequence; a long key range (1100) with few queries.
const std::vector<std::pair<int, int>> kMixed = {{300, 300}, {1, 33}, {40, 90}, {0, 10}, {17, 1100}, {530, 530}};

TEST_P(AttentionBf16Test, MixedBatchGqa) { check_case(make_case(kMixed), 8, 2, GetParam(), 1); }
TEST_P(AttentionBf16Test, MultiHead) { check_case(make_case({{70, 70}, {129, 129}}), 3, 3, GetParam(), 2); }

TEST_P(AttentionBf16Test, PaddingMask) {
  AttentionCase c = make_case({{20, 20}, {64, 64}, {9, 100}, {7, 7}});
  c.kv_lens = {13, 64, 71, 0};  // the last sequence sees no key: zeros
  check_case(c, 4, 2, GetParam(), 3);
}

TEST_P(AttentionBf16Test, ExplicitScale) {
  AttentionCase c = make_case({{50, 60}});
  c.scale = 0.5f;
  check_case(c, 2, 1, GetParam(), 4);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionBf16Test, ::testing::Values(64, 128));

TEST(AttentionBf16Test, CausalRequestRunsTheF32Kernel) {
  std::mt19937 rng(5);
  const AttentionCase c = make_case({{40, 40}, {7, 20}});
  const Tensor q = test::random_tensor({47, 4, 64}, rng), k = test::random_tensor({60, 2, 64}, rng);
  const Tensor v = test::random_tensor({60, 2, 64}, rng);
  const ops::AttentionSeqs seqs{i32(c.cu_q), i32(c.cu_k), Tensor()};
  const Tensor a = ops::attention(q, k, v, seqs, {.causal = true, .precision = ops::AttentionPrecision::bf16});
  const Tensor b = ops::attention(q, k, v, seqs, {.causal = true});
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * sizeof(float)), 0);
}

TEST(AttentionBf16Test, PathSaysWhatBf16Runs) {
  const std::string path = ops::attention_path();
  EXPECT_NE(path.find(native_bf16() ? "oneDNN bf16 matmuls" : "the f32 kernel (no native bf16"), std::string::npos)
      << path;
}

}  // namespace
}  // namespace prism

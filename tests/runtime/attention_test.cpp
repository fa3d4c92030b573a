// ops::attention against a double-precision softmax(Q K^T * scale + mask) V: mixed-length
// batches, causal and not, padding, grouped-query heads, head dims of the tiled path (multiples
// of 8 up to 128, whole and half AVX-512 vectors) and of the scalar one, decode, chunked
// prefill, empty sequences, strided inputs and the split (flash-decoding) path. Run once per
// tier (PRISM_ISA): every bound here holds on each.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/ops.h"
#include "test_util/attention.h"

namespace prism {
namespace {

using test::AttentionCase;

// NOTE: tolerance. Scores and unnormalised outputs are the same bits on every tier (each sums
// its terms in order, one FMA a term); a tier changes only how l, the softmax denominator, is
// summed: kLanes (16 or 8) lane-wise partial sums of positive terms, rescaled once per 64-key
// tile, then reduced. Its relative error is at most (n / 8 + n / 64 + 4) u for n keys
// (u = 2^-24): 2.5e-5 for the longest row here (3000 keys), and it moves an output by that
// fraction of itself, under 1e-5 since an average of 3000 random values in [-1, 1) is ~0.02 in
// size; for rows under ~1,100 keys it is under 1e-5 even at |out| = 1. The common rounding
// (q * scale, D-term dots, n-term P V sums) grows like sqrt(n) u in these random rows: ~1e-6.
constexpr double kTol = 1e-5;

Tensor i32(const std::vector<int32_t>& v) {
  return Tensor::from<int32_t>(std::span<const int32_t>(v), {int64_t(v.size())});
}

// (q_len, k_len) per sequence -> cu_seqlens.
AttentionCase make_case(const std::vector<std::pair<int, int>>& lens, bool causal) {
  AttentionCase c;
  c.causal = causal;
  c.cu_q = {0};
  c.cu_k = {0};
  for (auto [ql, kl] : lens) {
    c.cu_q.push_back(c.cu_q.back() + ql);
    c.cu_k.push_back(c.cu_k.back() + kl);
  }
  return c;
}

// Runs ops::attention on random q, k, v for the case and checks it against the reference.
void check_case(const AttentionCase& c, int hq, int hkv, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  const Tensor q = test::random_tensor({c.cu_q.back(), hq, d}, rng);
  const Tensor k = test::random_tensor({c.cu_k.back(), hkv, d}, rng);
  const Tensor v = test::random_tensor({c.cu_k.back(), hkv, d}, rng);
  ops::AttentionSeqs seqs{i32(c.cu_q), i32(c.cu_k), c.kv_lens.empty() ? Tensor() : i32(c.kv_lens)};
  const Tensor out = ops::attention(q, k, v, seqs, {.scale = c.scale, .causal = c.causal});
  ASSERT_EQ(out.shape(), Dims({c.cu_q.back(), hq, d}));
  EXPECT_LE(test::max_scaled_error(out, test::reference_attention(q, k, v, c), kTol, kTol), 1.0)
      << "hq " << hq << " hkv " << hkv << " d " << d << " causal " << c.causal;
}

// Prefill, chunked prefill (q_len < k_len), decode (q_len 1), an empty sequence and
// sequences that straddle tile edges, all in one batch.
const std::vector<std::pair<int, int>> kMixed = {{5, 5}, {70, 70}, {1, 33}, {0, 10}, {17, 150}, {130, 130}, {1, 1}};

class AttentionHeadDimTest : public ::testing::TestWithParam<int> {};

TEST_P(AttentionHeadDimTest, MixedBatchCausalGqa) { check_case(make_case(kMixed, true), 8, 2, GetParam(), 1); }
TEST_P(AttentionHeadDimTest, MixedBatchNonCausalGqa) { check_case(make_case(kMixed, false), 8, 2, GetParam(), 2); }
TEST_P(AttentionHeadDimTest, MultiHead) { check_case(make_case({{40, 40}, {3, 90}}, true), 3, 3, GetParam(), 3); }

TEST_P(AttentionHeadDimTest, PaddingMask) {
  for (bool causal : {false, true}) {
    AttentionCase c = make_case({{20, 20}, {64, 64}, {9, 100}, {7, 7}}, causal);
    c.kv_lens = {13, 64, 71, 0};  // the last sequence sees no key: zeros
    check_case(c, 8, 2, GetParam(), 4);
  }
}

// Tiled on every tier: 8, 24, 40, 72 end in half an AVX-512 vector (whole AVX2 ones).
INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionHeadDimTest, ::testing::Values(8, 24, 32, 40, 64, 72, 80, 96, 128));

TEST(AttentionTest, OtherHeadDimsTakeTheScalarPath) {
  check_case(make_case(kMixed, true), 4, 2, 36, 5);   // not a multiple of 8
  check_case(make_case(kMixed, false), 4, 2, 12, 6);
  check_case(make_case(kMixed, true), 4, 2, 160, 16);  // past 128
}

TEST(AttentionTest, ManyQueryHeadsPerKvHead) {
  check_case(make_case({{9, 9}, {1, 70}}, true), 16, 1, 64, 7);  // 16 heads x 4 tokens an item
  check_case(make_case({{3, 3}, {1, 40}}, true), 80, 1, 64, 8);   // a group wider than an item
  check_case(make_case({{5, 20}}, false), 12, 4, 64, 9);          // 3 heads a group
}

TEST(AttentionTest, MoreQueriesThanKeysLeavesEarlyRowsEmpty) {
  // Query i sits at position k_len - q_len + i: the first rows have negative positions.
  check_case(make_case({{10, 4}}, true), 2, 1, 64, 10);
}

TEST(AttentionTest, ExplicitScale) {
  AttentionCase c = make_case({{30, 30}}, true);
  c.scale = 0.5f;
  check_case(c, 4, 4, 64, 11);
}

TEST(AttentionTest, LongDecodeSplitsKeys) {
  // Two (sequence, kv head) items: fewer than the threads want, so keys are split and merged.
  check_case(make_case({{1, 3000}}, true), 8, 2, 128, 12);
  check_case(make_case({{2, 1500}, {1, 700}}, false), 4, 1, 64, 13);
}

TEST(AttentionTest, StridedInputsFromFusedQkv) {
  std::mt19937 rng(14);
  const int t = 50, hq = 4, hkv = 2, d = 64;
  const Tensor qkv = test::random_tensor({t, hq + 2 * hkv, d}, rng);
  const Tensor q = qkv.slice(1, 0, hq), k = qkv.slice(1, hq, hq + hkv), v = qkv.slice(1, hq + hkv, hq + 2 * hkv);
  const AttentionCase c = make_case({{20, 20}, {30, 30}}, true);
  const Tensor out = ops::attention(q, k, v, {i32(c.cu_q), i32(c.cu_k), Tensor()});
  EXPECT_LE(test::max_scaled_error(out, test::reference_attention(q, k, v, c), kTol, kTol), 1.0);
}

TEST(AttentionTest, LargeScoresStayFinite) {
  // Scores near +-200 after scaling: exp would overflow without the running max.
  std::mt19937 rng(15);
  const AttentionCase c = make_case({{70, 70}}, true);
  Tensor q = test::random_tensor({70, 2, 64}, rng);
  const Tensor k = test::random_tensor({70, 2, 64}, rng), v = test::random_tensor({70, 2, 64}, rng);
  for (int64_t i = 0; i < q.numel(); ++i) q.data<float>()[i] *= 40.0f;
  const Tensor out = ops::attention(q, k, v, {i32(c.cu_q), i32(c.cu_k), Tensor()});
  EXPECT_LE(test::max_scaled_error(out, test::reference_attention(q, k, v, c), 1e-4, 1e-4), 1.0);
}

}  // namespace
}  // namespace prism

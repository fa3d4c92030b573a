// ops::store_kv and ops::paged_attention: K/V written through shuffled, non-contiguous block
// tables must give exactly what ops::attention gives on the same K/V laid out contiguously,
// and both must match the double-precision reference. Covers decode, chunked prefill, empty
// query sequences, GQA, head dims of the tiled path (multiples of 8 up to 128) and of the
// scalar one, bf16 and i8 caches and the split (flash-decoding) path; run once per tier.
// i8 caches: the kernel must equal ops::attention on the cache's own dequantised values (bit
// for bit), stay within a measured bound of the f32 result, and store_kv must keep one scale
// per (block, kv head) that resets at offset 0 and grows (requantising) on a larger token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/ops.h"
#include "test_util/attention.h"

namespace prism {
namespace {

constexpr int kBlockSize = 16;

Tensor i32(const std::vector<int32_t>& v) {
  return Tensor::from<int32_t>(std::span<const int32_t>(v), {int64_t(v.size())});
}

struct PagedCase {
  std::vector<int> q_lens, ctx_lens;  // per sequence; ctx includes this step's tokens
  int hq = 8, hkv = 2, d = 64;
  DType cache_dtype = DType::f32;
  bool causal = true;
};

// Fills every slot with NaN so that reading one nobody wrote poisons the result (i8: junk
// values; its scales start as NaN, see nan_scales).
Tensor nan_cache(int64_t num_blocks, int hkv, int d, DType dtype) {
  Tensor c = Tensor::empty({num_blocks, kBlockSize, hkv, d}, dtype);
  if (dtype == DType::f32) std::fill_n(c.data<float>(), c.numel(), std::numeric_limits<float>::quiet_NaN());
  else if (dtype == DType::bf16) std::fill_n(c.data<bf16>(), c.numel(), bf16{0x7fc0});
  else std::fill_n(c.data<int8_t>(), c.numel(), int8_t(99));
  return c;
}

Tensor nan_scales(int64_t num_blocks, int hkv) {
  Tensor s = Tensor::empty({num_blocks, hkv}, DType::f32);
  std::fill_n(s.data<float>(), s.numel(), std::numeric_limits<float>::quiet_NaN());
  return s;
}

// [T, Hkv, D] f32: what an i8 cache holds for the given slots, q * scale(block, head).
Tensor dequantize_slots(const Tensor& cache, const Tensor& scales, const std::vector<int32_t>& slots) {
  const int64_t H = cache.size(2), D = cache.size(3), bs = cache.size(1);
  Tensor out = Tensor::empty({int64_t(slots.size()), H, D}, DType::f32);
  for (size_t t = 0; t < slots.size(); ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float scale = scales.data<float>()[slots[t] / bs * H + h];
      const int8_t* q = cache.data<int8_t>() + (int64_t(slots[t]) * H + h) * D;
      for (int64_t d = 0; d < D; ++d) out.data<float>()[(int64_t(t) * H + h) * D + d] = float(q[d]) * scale;
    }
  return out;
}

void run_case(const PagedCase& pc, uint32_t seed) {
  std::mt19937 rng(seed);
  const int num_seqs = int(pc.ctx_lens.size());
  test::AttentionCase c;
  c.causal = pc.causal;
  c.cu_q = {0};
  c.cu_k = {0};
  for (int s = 0; s < num_seqs; ++s) {
    c.cu_q.push_back(c.cu_q.back() + pc.q_lens[s]);
    c.cu_k.push_back(c.cu_k.back() + pc.ctx_lens[s]);
  }
  const int64_t tk = c.cu_k.back();
  const Tensor q = test::random_tensor({c.cu_q.back(), pc.hq, pc.d}, rng);
  Tensor k = test::random_tensor({tk, pc.hkv, pc.d}, rng);
  Tensor v = test::random_tensor({tk, pc.hkv, pc.d}, rng);
  if (pc.cache_dtype == DType::bf16) {  // the cache rounds; compare on the rounded values
    k = k.to(DType::bf16).to(DType::f32);
    v = v.to(DType::bf16).to(DType::f32);
  }

  // Blocks handed out in shuffled order, with spare blocks nobody uses.
  std::vector<int> blocks_of(num_seqs);
  int total_blocks = 0, max_blocks = 1;
  for (int s = 0; s < num_seqs; ++s) {
    blocks_of[s] = (pc.ctx_lens[s] + kBlockSize - 1) / kBlockSize;
    total_blocks += blocks_of[s];
    max_blocks = std::max(max_blocks, blocks_of[s] + 1);
  }
  const int num_blocks = total_blocks + 7;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(size_t(num_seqs) * max_blocks, -1);
  std::vector<int32_t> slots(tk);
  int next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    for (int b = 0; b < blocks_of[s]; ++b) table[s * max_blocks + b] = ids[next++];
    for (int j = 0; j < pc.ctx_lens[s]; ++j)
      slots[c.cu_k[s] + j] = table[s * max_blocks + j / kBlockSize] * kBlockSize + j % kBlockSize;
  }

  ops::PagedKv kv;
  kv.k_cache = nan_cache(num_blocks, pc.hkv, pc.d, pc.cache_dtype);
  kv.v_cache = nan_cache(num_blocks, pc.hkv, pc.d, pc.cache_dtype);
  if (pc.cache_dtype == DType::i8) {
    kv.k_scale = nan_scales(num_blocks, pc.hkv);
    kv.v_scale = nan_scales(num_blocks, pc.hkv);
  }
  kv.block_tables = Tensor::from<int32_t>(std::span<const int32_t>(table), {num_seqs, max_blocks});
  kv.context_lens = i32(std::vector<int32_t>(pc.ctx_lens.begin(), pc.ctx_lens.end()));
  // Two store_kv calls, as a prefill then a step would: the second also carries skipped rows.
  const int64_t half = tk / 2;
  ops::store_kv(k.slice(0, 0, half), v.slice(0, 0, half),
                i32(std::vector<int32_t>(slots.begin(), slots.begin() + half)), kv);
  std::vector<int32_t> rest(slots.begin() + half, slots.end());
  rest.push_back(-1);
  std::mt19937 junk_rng(seed + 1);
  const Tensor junk = test::random_tensor({1, pc.hkv, pc.d}, junk_rng);
  const Tensor k_rest = Tensor::empty({tk - half + 1, pc.hkv, pc.d}, DType::f32);
  const Tensor v_rest = Tensor::empty({tk - half + 1, pc.hkv, pc.d}, DType::f32);
  k_rest.slice(0, 0, tk - half).copy_from(k.slice(0, half, tk));
  v_rest.slice(0, 0, tk - half).copy_from(v.slice(0, half, tk));
  k_rest.slice(0, tk - half, tk - half + 1).copy_from(junk);
  v_rest.slice(0, tk - half, tk - half + 1).copy_from(junk);
  ops::store_kv(k_rest, v_rest, i32(rest), kv);

  const ops::AttentionParams params{.scale = 0.0f, .causal = pc.causal};
  const Tensor paged = ops::paged_attention(q, i32(c.cu_q), kv, params);
  // i8: the contiguous run reads what the cache holds; the reference stays the f32 input.
  const bool i8 = pc.cache_dtype == DType::i8;
  const Tensor k_held = i8 ? dequantize_slots(kv.k_cache, kv.k_scale, slots) : k;
  const Tensor v_held = i8 ? dequantize_slots(kv.v_cache, kv.v_scale, slots) : v;
  const Tensor flat = ops::attention(q, k_held, v_held, {i32(c.cu_q), i32(c.cu_k), Tensor()}, params);
  ASSERT_EQ(paged.shape(), flat.shape());
  // Same arithmetic in the same order: only where the rows come from differs.
  EXPECT_EQ(std::memcmp(paged.raw_data(), flat.raw_data(), paged.nbytes()), 0) << "paged != contiguous";
  // i8 bound: the error is store_kv's quantisation, the same on every tier (the kernel's own
  // rounding, tier-dependent only in l's summation, is ~1e-5: see attention_test.cpp). Values
  // in [-1, 1) quantise with a step s <= 1/127 per (block, head), off by <= s / 2 a rounding.
  // V's error passes through the softmax's convex weights: <= s / 2 per rounding a row saw
  // (a write, then a requantisation or two: <= ~0.008). K's error moves a score by
  // scale * q . dk, D independent roundings: ~s / 6 = 1.3e-3 standard deviation, an output
  // shift of that order. Both ~0.01 at most, as measured; 0.02 + 2% leaves a 2x margin.
  const double tol = i8 ? 2e-2 : 1e-5;
  EXPECT_LE(test::max_scaled_error(paged, test::reference_attention(q, k, v, c), tol, tol), 1.0);
}

class PagedHeadDimTest : public ::testing::TestWithParam<int> {};

TEST_P(PagedHeadDimTest, DecodeBatch) {
  run_case({.q_lens = {1, 1, 1, 1, 1}, .ctx_lens = {1, 16, 17, 100, 257}, .hq = 8, .hkv = 2, .d = GetParam()}, 1);
}

TEST_P(PagedHeadDimTest, ChunkedPrefillAndEmptyQueries) {
  run_case({.q_lens = {7, 0, 40, 1, 16}, .ctx_lens = {40, 25, 40, 90, 80}, .hq = 8, .hkv = 2, .d = GetParam()}, 2);
}

TEST_P(PagedHeadDimTest, NonCausal) {
  run_case({.q_lens = {3, 12}, .ctx_lens = {50, 12}, .hq = 4, .hkv = 4, .d = GetParam(), .causal = false}, 3);
}

TEST_P(PagedHeadDimTest, Bf16Cache) {
  run_case({.q_lens = {1, 9, 1}, .ctx_lens = {70, 9, 33}, .hq = 8, .hkv = 2, .d = GetParam(),
            .cache_dtype = DType::bf16}, 4);
}

TEST_P(PagedHeadDimTest, I8Cache) {
  run_case({.q_lens = {1, 9, 1, 20}, .ctx_lens = {70, 9, 33, 45}, .hq = 8, .hkv = 2, .d = GetParam(),
            .cache_dtype = DType::i8}, 9);
}

// 8, 24, 40, 72: half an AVX-512 vector at the end of each row (whole AVX2 ones).
INSTANTIATE_TEST_SUITE_P(HeadDims, PagedHeadDimTest, ::testing::Values(8, 24, 40, 64, 72, 80, 96, 128));

TEST(PagedAttentionTest, LongContextSplitsKeys) {
  run_case({.q_lens = {1}, .ctx_lens = {2100}, .hq = 8, .hkv = 2, .d = 128}, 5);
  run_case({.q_lens = {1}, .ctx_lens = {1500}, .hq = 4, .hkv = 1, .d = 64, .cache_dtype = DType::bf16}, 6);
}

TEST(PagedAttentionTest, LlamaShapedDecode) {
  run_case({.q_lens = {1, 1, 1}, .ctx_lens = {300, 45, 128}, .hq = 32, .hkv = 8, .d = 128}, 7);
  run_case({.q_lens = {1, 1, 1}, .ctx_lens = {300, 45, 128}, .hq = 32, .hkv = 8, .d = 128, .cache_dtype = DType::i8}, 7);
}

TEST(PagedAttentionTest, I8LongContextAndScalarHeadDim) {
  run_case({.q_lens = {1}, .ctx_lens = {1500}, .hq = 4, .hkv = 1, .d = 64, .cache_dtype = DType::i8}, 10);
  run_case({.q_lens = {1, 5}, .ctx_lens = {40, 20}, .hq = 4, .hkv = 2, .d = 36, .cache_dtype = DType::i8}, 11);
}

TEST(PagedAttentionTest, ScalarHeadDim) {  // not a multiple of 8: the scalar path on every tier
  run_case({.q_lens = {1, 5}, .ctx_lens = {40, 20}, .hq = 4, .hkv = 2, .d = 36}, 8);
  run_case({.q_lens = {1, 5}, .ctx_lens = {70, 20}, .hq = 4, .hkv = 2, .d = 36, .cache_dtype = DType::bf16}, 12);
}

TEST(PagedAttentionTest, StoreKvSkipsNegativeSlotsAndConverts) {
  ops::PagedKv kv;
  kv.k_cache = nan_cache(2, 1, 16, DType::bf16);
  kv.v_cache = nan_cache(2, 1, 16, DType::bf16);
  std::vector<float> vals(3 * 16);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = 1.0f + float(i) / 1024;
  const Tensor k = Tensor::from<float>(std::span<const float>(vals), {3, 1, 16});
  ops::store_kv(k, k, i32({17, -1, 3}), kv);
  const bf16* kc = kv.k_cache.data<bf16>();
  for (int d = 0; d < 16; ++d) {
    EXPECT_EQ(kc[17 * 16 + d].bits, f32_to_bf16(vals[d]).bits);
    EXPECT_EQ(kc[3 * 16 + d].bits, f32_to_bf16(vals[32 + d]).bits);
  }
  int untouched = 0;
  for (int64_t i = 0; i < kv.k_cache.numel(); ++i) untouched += std::isnan(bf16_to_f32(kc[i]));
  EXPECT_EQ(untouched, (32 - 2) * 16);
}

}  // namespace
}  // namespace prism

// KvBlockPool: allocation and ref counts, prefix-cache publish/lookup by hash chain, LRU
// eviction of unreferenced cached blocks only when a fresh block is needed, prefix caching
// off; KvCache sizing and block copies.
#include "engines/generate/kv_block_pool.h"

#include <gtest/gtest.h>

#include <set>

#include "engines/generate/kv_cache.h"

namespace prism::engines::generate {
namespace {

TEST(KvBlockPool, AllocatesUntilDryAndReusesReleasedBlocks) {
  KvBlockPool pool(3, 4, true);
  EXPECT_EQ(pool.num_free(), 3);
  const int a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  EXPECT_EQ(std::set<int>({a, b, c}).size(), 3u);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_used(), 3);
  pool.retain(b);  // shared by two sequences
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 0);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(*pool.allocate(), b);
}

TEST(KvBlockPool, HashChainDependsOnParentAndTokens) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto h = hash_full_blocks(t, 4, 100);
  ASSERT_EQ(h.size(), 2u);  // the partial third block is not hashed
  EXPECT_EQ(h[0], hash_block(kRootBlockHash, std::span(t).first(4)));
  EXPECT_EQ(h[1], hash_block(h[0], std::span(t).subspan(4, 4)));
  // Same tokens under another parent: another hash.
  EXPECT_NE(hash_block(kRootBlockHash, std::span(t).subspan(4, 4)), h[1]);
  EXPECT_EQ(hash_full_blocks(t, 4, 1).size(), 1u);
}

TEST(KvBlockPool, PublishedBlocksStayCachedAndAreHitByLookup) {
  KvBlockPool pool(4, 4, true);
  const int a = *pool.allocate();
  pool.publish(a, 111);
  EXPECT_EQ(pool.lookup(111), a);
  EXPECT_FALSE(pool.lookup(222).has_value());
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 4);  // evictable counts as free
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.lookup(111), a);  // still cached
  pool.retain(a);                  // a hit
  EXPECT_EQ(pool.num_used(), 1);
  EXPECT_EQ(pool.ref_count(a), 1);
  // A second block with the same hash is not published (first one wins).
  const int b = *pool.allocate();
  pool.publish(b, 111);
  EXPECT_FALSE(pool.is_published(b));
  EXPECT_EQ(pool.lookup(111), a);
}

TEST(KvBlockPool, EvictsLeastRecentlyReleasedOnlyWhenNothingIsFree) {
  KvBlockPool pool(3, 4, true);
  const int a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  pool.publish(a, 1);
  pool.publish(b, 2);
  pool.release(b);  // released first: evicted first
  pool.release(a);
  pool.release(c);  // unpublished: goes to the free list
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(*pool.allocate(), c);  // the free list before any eviction
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(*pool.allocate(), b);  // LRU: b went first
  EXPECT_FALSE(pool.lookup(2).has_value());
  EXPECT_EQ(pool.lookup(1), a);
  // A hit moves a out of the LRU list; nothing left to evict.
  pool.retain(a);
  EXPECT_FALSE(pool.allocate().has_value());
}

TEST(KvBlockPool, PrefixCachingOffNeverPublishes) {
  KvBlockPool pool(2, 4, false);
  const int a = *pool.allocate();
  pool.publish(a, 7);
  EXPECT_FALSE(pool.is_published(a));
  EXPECT_FALSE(pool.lookup(7).has_value());
  pool.release(a);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(KvCache, SizesBlocksAndCopiesThemInEveryLayer) {
  const models::KvSpec spec{3, 2, 8};
  EXPECT_EQ(kv_bytes_per_block(spec, 16, DType::bf16), 3 * 2 * 16 * 2 * 8 * 2);
  EXPECT_EQ(kv_bytes_per_block(spec, 16, DType::i8), 3 * 2 * (16 * 2 * 8 + 2 * 4));
  EXPECT_EQ(*parse_kv_cache_dtype("auto", ops::Precision::f32), DType::f32);
  EXPECT_EQ(*parse_kv_cache_dtype("auto", ops::Precision::bf16), DType::bf16);
  EXPECT_EQ(*parse_kv_cache_dtype("int8", ops::Precision::bf16), DType::i8);
  EXPECT_FALSE(parse_kv_cache_dtype("fp8", ops::Precision::bf16).has_value());

  KvCache kv(spec, 4, 2, DType::i8);
  EXPECT_EQ(kv.bytes(), 4 * kv_bytes_per_block(spec, 2, DType::i8));
  for (const models::KvLayer& l : kv.layers()) {
    int8_t* k = l.k.data<int8_t>();
    for (int i = 0; i < 2 * 2 * 8; ++i) k[1 * 32 + i] = int8_t(i);
    l.k_scale.data<float>()[1 * 2 + 1] = 0.5f;
  }
  kv.copy_block(1, 3);
  for (const models::KvLayer& l : kv.layers()) {
    for (int i = 0; i < 32; ++i) EXPECT_EQ(l.k.data<int8_t>()[3 * 32 + i], int8_t(i));
    EXPECT_EQ(l.k_scale.data<float>()[3 * 2 + 1], 0.5f);
  }
}

}  // namespace
}  // namespace prism::engines::generate

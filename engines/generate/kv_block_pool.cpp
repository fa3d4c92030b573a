// engines/generate/kv_block_pool.cpp: free list, ref counts, the prefix-cache map and its LRU.
#include "engines/generate/kv_block_pool.h"

#include <algorithm>

#include <xxhash.h>

#include "base/check.h"

namespace prism::engines::generate {

uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent_hash);
}

uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens, std::span<const uint64_t> seeds) {
  const uint64_t text = hash_block(parent_hash, tokens);
  seeds = seeds.first(std::min(seeds.size(), tokens.size()));
  if (std::all_of(seeds.begin(), seeds.end(), [](uint64_t s) { return s == 0; })) return text;
  // Zeros included: the seeds' positions within the block are part of what is hashed.
  if (seeds.size() == tokens.size()) return XXH3_64bits_withSeed(seeds.data(), seeds.size_bytes(), text);
  std::vector<uint64_t> padded(tokens.size(), 0);  // a prompt's seeds ending inside the block
  std::copy(seeds.begin(), seeds.end(), padded.begin());
  return XXH3_64bits_withSeed(padded.data(), padded.size() * sizeof(uint64_t), text);
}

std::vector<uint64_t> hash_full_blocks(std::span<const int32_t> tokens, int block_size, int64_t max_blocks,
                                       std::span<const uint64_t> seeds) {
  std::vector<uint64_t> hashes;
  uint64_t parent = kRootBlockHash;
  for (size_t start = 0; start + size_t(block_size) <= tokens.size() && int64_t(hashes.size()) < max_blocks;
       start += size_t(block_size)) {
    const std::span<const uint64_t> block_seeds =
        start < seeds.size() ? seeds.subspan(start, std::min(seeds.size() - start, size_t(block_size)))
                             : std::span<const uint64_t>();
    parent = hash_block(parent, tokens.subspan(start, size_t(block_size)), block_seeds);
    hashes.push_back(parent);
  }
  return hashes;
}

KvBlockPool::KvBlockPool(int num_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      ref_(size_t(num_blocks), 0),
      hash_of_(size_t(num_blocks)),
      lru_prev_(size_t(num_blocks), -1),
      lru_next_(size_t(num_blocks), -1) {
  PRISM_CHECK(num_blocks > 0 && block_size > 0);
  free_.reserve(size_t(num_blocks));
  // A stack popped from the back: hand out low ids first (easier to read in tests and dumps).
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int> KvBlockPool::allocate() {
  int block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    block = lru_head_;
    lru_remove(block);
    cached_.erase(*hash_of_[size_t(block)]);
    hash_of_[size_t(block)].reset();
  } else {
    return std::nullopt;
  }
  PRISM_CHECK(ref_[size_t(block)] == 0);
  ref_[size_t(block)] = 1;
  return block;
}

void KvBlockPool::retain(int block) {
  PRISM_CHECK(block >= 0 && block < num_blocks());
  if (ref_[size_t(block)]++ == 0) {
    // NOTE: only published blocks can be retained at ref 0 (a prefix hit); they sit in the LRU.
    PRISM_CHECK(hash_of_[size_t(block)].has_value());
    lru_remove(block);
  }
}

void KvBlockPool::release(int block) {
  PRISM_CHECK(block >= 0 && block < num_blocks() && ref_[size_t(block)] > 0);
  if (--ref_[size_t(block)] > 0) return;
  if (hash_of_[size_t(block)].has_value()) lru_push_back(block);
  else free_.push_back(block);
}

std::optional<int> KvBlockPool::lookup(uint64_t hash) const {
  if (!prefix_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void KvBlockPool::publish(int block, uint64_t hash) {
  PRISM_CHECK(block >= 0 && block < num_blocks() && ref_[size_t(block)] > 0);
  if (!prefix_caching_ || hash_of_[size_t(block)].has_value()) return;
  if (!cached_.emplace(hash, block).second) return;
  hash_of_[size_t(block)] = hash;
}

void KvBlockPool::lru_push_back(int block) {
  lru_prev_[size_t(block)] = lru_tail_;
  lru_next_[size_t(block)] = -1;
  if (lru_tail_ >= 0) lru_next_[size_t(lru_tail_)] = block;
  else lru_head_ = block;
  lru_tail_ = block;
  ++num_evictable_;
}

void KvBlockPool::lru_remove(int block) {
  const int prev = lru_prev_[size_t(block)], next = lru_next_[size_t(block)];
  if (prev >= 0) lru_next_[size_t(prev)] = next;
  else lru_head_ = next;
  if (next >= 0) lru_prev_[size_t(next)] = prev;
  else lru_tail_ = prev;
  lru_prev_[size_t(block)] = lru_next_[size_t(block)] = -1;
  --num_evictable_;
}

}  // namespace prism::engines::generate

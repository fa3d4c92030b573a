// engines/generate/kv_block_pool.h: the paged KV cache's bookkeeping (vLLM's design): a fixed
// number of blocks of block_size token slots, a free list, reference counts (a block shared by
// the n choices of a request or by prefix-cache hits), and automatic prefix caching: a full
// block whose tokens are final is published under hash(parent block's hash, its token ids);
// a later sequence with the same prefix retains it instead of recomputing. Unreferenced
// published blocks stay cached and are evicted least recently used only when a fresh block is
// needed. Ids only: it never touches the K/V tensors (kv_cache.h does) and knows nothing of
// sequences or steps. Engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace prism::engines::generate {

// The hash chain's start: the parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0x9e3779b97f4a7c15ull;

// XXH3-64 of a block's token ids seeded with its parent's hash.
uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens);
// The same, also covering the media seeds of the block's positions (seeds[i] for tokens[i]; 0
// for a text position; shorter than tokens or empty: the rest are 0). A block whose seeds are
// all 0 hashes as text alone, so text-only prompts keep their hashes.
// NOTE: a visual position's seed names the media item, its pooling and the row it holds, so
// identical placeholder ids in front of different images never share a block (isolation).
uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens, std::span<const uint64_t> seeds);

// The hashes of the full blocks of `tokens` (block i covers tokens [i·bs, (i+1)·bs)), at most
// max_blocks of them; `seeds` as for hash_block (per position of tokens, may be shorter).
std::vector<uint64_t> hash_full_blocks(std::span<const int32_t> tokens, int block_size, int64_t max_blocks,
                                       std::span<const uint64_t> seeds = {});

class KvBlockPool {
 public:
  KvBlockPool(int num_blocks, int block_size, bool prefix_caching);

  int num_blocks() const { return int(ref_.size()); }
  int block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks allocate() can hand out now: never used, freed, and cached ones nobody references.
  int num_free() const { return int(free_.size()) + num_evictable_; }
  int num_used() const { return num_blocks() - num_free(); }  // referenced by some sequence
  int num_cached() const { return int(cached_.size()); }       // published (referenced or not)
  int ref_count(int block) const { return ref_[size_t(block)]; }

  // A fresh block with ref count 1: from the free list, else the least recently released
  // cached block (evicted: its hash is forgotten). nullopt when every block is referenced.
  std::optional<int> allocate();
  // One more reference (a fork, a prefix hit). A cached block at ref 0 leaves the LRU list.
  void retain(int block);
  // One reference less; at 0 a published block joins the LRU list (most recent end), an
  // unpublished one the free list.
  void release(int block);

  // The published block holding the tokens behind `hash`, if cached (not retained: call
  // retain). Always nullopt with prefix caching off.
  std::optional<int> lookup(uint64_t hash) const;
  // Publishes a full block of final tokens under `hash`. No-op with prefix caching off, when
  // the block is already published, or when another block holds that hash (first one wins).
  void publish(int block, uint64_t hash);
  bool is_published(int block) const { return hash_of_[size_t(block)].has_value(); }

 private:
  // Doubly linked LRU list of unreferenced published blocks, threaded through arrays.
  void lru_push_back(int block);
  void lru_remove(int block);

  int block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_;
  std::vector<int> free_;                          // unpublished, unreferenced (a stack)
  std::vector<std::optional<uint64_t>> hash_of_;  // per block: its published hash
  std::unordered_map<uint64_t, int> cached_;       // hash → block
  std::vector<int> lru_prev_, lru_next_;           // -1 terminated
  int lru_head_ = -1, lru_tail_ = -1;              // head: least recently released
  int num_evictable_ = 0;
};

}  // namespace prism::engines::generate

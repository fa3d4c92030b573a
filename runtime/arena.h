// Arena: bump allocation for the activations of one forward pass, so the hot loop does not
// call malloc. Tensor::empty draws from the arena made current on this thread by ArenaScope.
// NOTE: reset() invalidates every tensor allocated since the last reset; the engine resets
// once per step, after the step's outputs were copied out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace prism {

class Arena {
 public:
  explicit Arena(size_t initial_bytes = 0);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Never fails: when the current block is full a new one is chained; the next reset()
  // merges them into one block of the high-water size, so a steady state allocates nothing.
  void* allocate(size_t bytes, size_t align = 64);
  void reset();

  size_t used_bytes() const { return used_; }
  size_t capacity_bytes() const;
  size_t high_water_bytes() const { return high_water_; }
  int num_blocks() const { return int(blocks_.size()); }

 private:
  struct Block {
    std::byte* data;
    size_t size;
  };
  void add_block(size_t min_bytes);

  std::vector<Block> blocks_;
  size_t offset_ = 0;      // into blocks_.back()
  size_t used_ = 0;        // bytes handed out since reset, all blocks
  size_t high_water_ = 0;
};

// Makes `arena` the current one on this thread for the scope's lifetime (nests).
class ArenaScope {
 public:
  explicit ArenaScope(Arena* arena);
  ~ArenaScope();
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena* previous_;
};

Arena* current_arena();  // null when none is active on this thread

// 64-byte aligned heap memory, freed when the last owner goes.
std::shared_ptr<void> allocate_aligned(size_t bytes);
// How many buffers this process has taken from the heap for tensors and arenas (every
// allocate_aligned, heap Tensor::empty and arena block), so tests can assert that a steady
// state takes none.
uint64_t aligned_allocations();

}  // namespace prism

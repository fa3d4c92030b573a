// Arena and aligned heap allocation.
#include "runtime/arena.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

#include "base/check.h"

namespace prism {
namespace {
thread_local Arena* g_current_arena = nullptr;
constexpr size_t kMinBlockBytes = size_t(1) << 20;
std::atomic<uint64_t> g_aligned_allocations{0};

void* aligned_or_die(size_t bytes) {
  g_aligned_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  PRISM_CHECK_MSG(p != nullptr, "out of memory");
  return p;
}
}  // namespace

Arena::Arena(size_t initial_bytes) {
  if (initial_bytes > 0) add_block(initial_bytes);
}

Arena::~Arena() {
  for (Block& b : blocks_) std::free(b.data);
}

void Arena::add_block(size_t min_bytes) {
  const size_t size = std::max(min_bytes, kMinBlockBytes);
  blocks_.push_back({static_cast<std::byte*>(aligned_or_die(size)), size});
  offset_ = 0;
}

void* Arena::allocate(size_t bytes, size_t align) {
  PRISM_CHECK(align > 0 && (align & (align - 1)) == 0 && align <= 4096);
  bytes = std::max<size_t>(bytes, 1);
  if (!blocks_.empty()) {
    const size_t start = (offset_ + align - 1) & ~(align - 1);
    if (start + bytes <= blocks_.back().size) {
      used_ += start - offset_ + bytes;
      offset_ = start + bytes;
      high_water_ = std::max(high_water_, used_);
      return blocks_.back().data + start;
    }
  }
  add_block(std::max(bytes + align, blocks_.empty() ? 0 : blocks_.back().size * 2));
  const size_t start = 0;  // blocks are 64-byte aligned; larger alignments are rounded below
  std::byte* p = blocks_.back().data;
  const size_t pad = (align - (reinterpret_cast<uintptr_t>(p) & (align - 1))) & (align - 1);
  offset_ = start + pad + bytes;
  used_ += pad + bytes;
  high_water_ = std::max(high_water_, used_);
  return p + pad;
}

void Arena::reset() {
  if (blocks_.size() > 1) {  // merge: one block big enough for the whole last step
    for (Block& b : blocks_) std::free(b.data);
    blocks_.clear();
    add_block(high_water_ + high_water_ / 8);
  }
  offset_ = 0;
  used_ = 0;
}

size_t Arena::capacity_bytes() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.size;
  return total;
}

ArenaScope::ArenaScope(Arena* arena) : previous_(g_current_arena) { g_current_arena = arena; }
ArenaScope::~ArenaScope() { g_current_arena = previous_; }

Arena* current_arena() { return g_current_arena; }

uint64_t aligned_allocations() { return g_aligned_allocations.load(std::memory_order_relaxed); }

std::shared_ptr<void> allocate_aligned(size_t bytes) {
  return std::shared_ptr<void>(aligned_or_die(bytes), [](void* p) { std::free(p); });
}

}  // namespace prism

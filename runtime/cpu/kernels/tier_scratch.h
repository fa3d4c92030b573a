// runtime/cpu/kernels/tier_scratch.h: a 64-byte aligned scratch buffer that only grows, for a
// kernel file to keep thread_local (steady state calls no malloc). The kernels' twin of
// runtime/cpu/scratch_buffer.h, in the tier's namespace: that one's inline members (and the
// std::shared_ptr code under them) would be compiled here with the tier's flags but keep
// external linkage, and the linker could hand an AVX-512 copy to AVX2 code.
#pragma once

#include <cstddef>
#include <cstdlib>

#ifndef PRISM_TIER
#error "runtime/cpu/kernels/ files are compiled once per tier, with PRISM_TIER set"
#endif

namespace prism::cpu::PRISM_TIER {

class TierScratch {
 public:
  TierScratch() = default;
  TierScratch(const TierScratch&) = delete;
  TierScratch& operator=(const TierScratch&) = delete;
  ~TierScratch() { std::free(mem_); }

  // At least `bytes`, 64-byte aligned; the contents are not kept across a growth.
  void* get(size_t bytes) {
    if (bytes > size_) {
      std::free(mem_);
      size_ = (bytes + bytes / 4 + 63) / 64 * 64;
      mem_ = std::aligned_alloc(64, size_);
      if (mem_ == nullptr) std::abort();
    }
    return mem_;
  }

 private:
  void* mem_ = nullptr;
  size_t size_ = 0;
};

}  // namespace prism::cpu::PRISM_TIER

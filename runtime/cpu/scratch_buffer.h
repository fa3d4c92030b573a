// runtime/cpu/scratch_buffer.h: a 64-byte aligned buffer that only grows, kept thread_local by
// the kernels that need conversion or packing scratch, so steady state calls no malloc.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/arena.h"

namespace prism::cpu {

class ScratchBuffer {
 public:
  void* get(size_t bytes) {
    if (bytes > size_) {
      size_ = bytes + bytes / 4;
      mem_ = allocate_aligned(size_);
    }
    return mem_.get();
  }

 private:
  std::shared_ptr<void> mem_;
  size_t size_ = 0;
};

}  // namespace prism::cpu

// runtime/cpu/stream_read.h: the per-tier streaming read behind the memory-bandwidth probe
// (runtime/memory_bandwidth.h). Defined in runtime/cpu/kernels/stream_read.cpp.
#pragma once

#include <cstdint>

#include "runtime/cpu/tier_table.h"

namespace prism::cpu {

struct StreamKernels {
  // The sum of p[0, n) (p 64-byte aligned), reading full vectors with enough independent
  // add chains that the loads, not the adds, bound it: a read of memory at full speed.
  float (*sum)(const float* p, int64_t n);
};

PRISM_TIER_TABLES(StreamKernels, kStreamKernels)

inline const StreamKernels& stream_kernels() {
  static const StreamKernels& k = tier_table(avx2::kStreamKernels, avx512::kStreamKernels, avx512_bf16::kStreamKernels);
  return k;
}

}  // namespace prism::cpu

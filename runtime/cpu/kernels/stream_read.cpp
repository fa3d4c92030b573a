// runtime/cpu/kernels/stream_read.cpp: StreamKernels (stream_read.h) for one tier: a sum over a
// buffer in whole aligned vectors, four cache lines per step with four independent chains
// (the add latency is hidden, the loads are the bound), one masked tail.
#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/stream_read.h"

namespace prism::cpu::PRISM_TIER {
namespace {

float sum(const float* p, int64_t n) {
  constexpr int64_t kStep = 64;  // floats per step: 4 cache lines
  Vec a[4] = {zero(), zero(), zero(), zero()};
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    for (int j = 0; j < kStep / kLanes; ++j) a[j % 4] = a[j % 4] + load_aligned(p + i + j * kLanes);
  }
  for (; i < n; i += kLanes) a[0] = a[0] + load_n(p + i, n - i);
  return reduce_add((a[0] + a[1]) + (a[2] + a[3]));
}

}  // namespace

extern const StreamKernels kStreamKernels = {
    .sum = sum,
};

}  // namespace prism::cpu::PRISM_TIER

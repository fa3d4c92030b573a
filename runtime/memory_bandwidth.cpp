// runtime/memory_bandwidth.cpp: see memory_bandwidth.h.
#include "runtime/memory_bandwidth.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

#include "runtime/arena.h"
#include "runtime/cpu/stream_read.h"
#include "runtime/threads.h"

namespace prism {
namespace {

double now_s(bool thread_cpu_clock) {
  if (thread_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double measure_read_bandwidth_gbs(size_t bytes, int passes, int threads, bool thread_cpu_clock) {
  const int nt = threads > 0 ? threads : num_threads();
  const int64_t n = int64_t(bytes / sizeof(float)) / 64 * 64;
  const std::shared_ptr<void> buffer = allocate_aligned(size_t(n) * sizeof(float));
  float* data = static_cast<float*>(buffer.get());
  constexpr int64_t kChunk = 1 << 14;  // floats per work item: 64 KiB
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  // First touch from the threads that will read, so pages sit where they are read.
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) data[i] = float(i & 1023) * 1e-3f;

  const cpu::StreamKernels& kernels = cpu::stream_kernels();
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int pass = 0; pass < passes; ++pass) {
    const double t0 = now_s(thread_cpu_clock);
    float total = 0.0f;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(+ : total)
    for (int64_t c = 0; c < chunks; ++c) total += kernels.sum(data + c * kChunk, std::min(kChunk, n - c * kChunk));
    const double s = now_s(thread_cpu_clock) - t0;
    sink = sink + total;
    best = std::max(best, double(n) * sizeof(float) / s / 1e9);
  }
  return best;
}

double measure_copy_bandwidth_gbs(size_t bytes, int passes) {
  const int64_t num_chunks = int64_t(bytes >> 20);  // 1 MiB chunks
  const std::shared_ptr<void> src_mem = allocate_aligned(size_t(num_chunks) << 20);
  const std::shared_ptr<void> dst_mem = allocate_aligned(size_t(num_chunks) << 20);
  char* src = static_cast<char*>(src_mem.get());
  char* dst = static_cast<char*>(dst_mem.get());
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < num_chunks; ++c) {
    std::memset(src + (c << 20), 1, size_t(1) << 20);
    std::memset(dst + (c << 20), 0, size_t(1) << 20);
  }
  double best = 0.0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < num_chunks; ++c) std::memcpy(dst + (c << 20), src + (c << 20), size_t(1) << 20);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(num_chunks << 20) / s / 1e9);
  }
  return best;
}

}  // namespace prism

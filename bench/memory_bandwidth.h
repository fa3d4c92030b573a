// bench/memory_bandwidth.h: the memory read ceiling that memory-bound benches divide by,
// measured in the same run (bandwidth here swings 2x with the neighbours). A multi-threaded
// streaming sum over a buffer far larger than the caches; best of several passes. Bench-only:
// nothing in the server includes it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace prism::bench {

// Read bandwidth in GB/s (1e9 bytes/s): the best of `passes` sums over `bytes` of memory.
inline double measure_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int passes = 5) {
  const int64_t n = int64_t(bytes / sizeof(float)) / 64 * 64;
  std::unique_ptr<float, decltype(&std::free)> buffer(
      static_cast<float*>(std::aligned_alloc(64, size_t(n) * sizeof(float))), &std::free);
  float* data = buffer.get();
  // First touch from the threads that will read, so pages sit where they are read.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) data[i] = float(i & 1023) * 1e-3f;

  double best = 0.0;
  volatile float sink = 0.0f;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t b = 0; b < n; b += 4096) {
      const int64_t e = std::min(n, b + 4096);
#ifdef __AVX512F__
      // Four independent chains keep the loads, not the adds, the bottleneck.
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = b; i < e; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(data + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(data + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(data + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(data + i + 48));
      }
      total += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
      float a[8] = {};
      for (int64_t i = b; i < e; i += 8)
        for (int j = 0; j < 8; ++j) a[j] += data[i + j];
      for (float x : a) total += x;
#endif
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    best = std::max(best, double(n) * sizeof(float) / s / 1e9);
  }
  return best;
}

// Copy bandwidth in GB/s, counting bytes read plus written: the ceiling of an op that reads
// one tensor and writes another of the same size. Best of `passes` over `bytes` each way.
inline double measure_copy_bandwidth_gbs(size_t bytes = size_t(256) << 20, int passes = 5) {
  std::unique_ptr<char, decltype(&std::free)> src(static_cast<char*>(std::aligned_alloc(64, bytes)), &std::free);
  std::unique_ptr<char, decltype(&std::free)> dst(static_cast<char*>(std::aligned_alloc(64, bytes)), &std::free);
  const int64_t num_chunks = int64_t(bytes >> 20);  // 1 MiB chunks
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < num_chunks; ++c) {
    std::memset(src.get() + (c << 20), 1, size_t(1) << 20);
    std::memset(dst.get() + (c << 20), 0, size_t(1) << 20);
  }
  double best = 0.0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < num_chunks; ++c) std::memcpy(dst.get() + (c << 20), src.get() + (c << 20), size_t(1) << 20);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(num_chunks << 20) / s / 1e9);
  }
  return best;
}

}  // namespace prism::bench

// runtime/gemm_peak.cpp: see gemm_peak.h.
#include "runtime/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace prism {
namespace {

Tensor random_tensor(const Dims& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

}  // namespace

Result<double> measure_gemm_peak(ops::Precision precision, int64_t size, double seconds) {
  const Tensor x = random_tensor({size, size}, 1);
  PRISM_ASSIGN_OR_RETURN(ops::LinearWeight w, ops::pack_linear(random_tensor({size, size}, 2), Tensor(), precision));
  ops::linear(x, w);  // warm-up: primitive creation, first touch
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double best_seconds = 1e30;
  while (std::chrono::duration<double>(clock::now() - start).count() < seconds) {
    const auto t0 = clock::now();
    ops::linear(x, w);
    best_seconds = std::min(best_seconds, std::chrono::duration<double>(clock::now() - t0).count());
  }
  return 2.0 * double(size * size * size) / best_seconds * 1e-9;
}

}  // namespace prism

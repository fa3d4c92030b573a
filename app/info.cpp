// prism info: what this machine offers Prism — CPU features, threads, oneDNN version, and
// the GEMM speed Prism's own `linear` reaches at 1024³ in each precision, measured in about
// a second (a third of a second per precision, best repetition).
#include <dnnl.hpp>

#include <chrono>
#include <cstdio>
#include <random>

#include "app/commands.h"
#include "runtime/cpu_features.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::app {
namespace {

constexpr int64_t kGemmSize = 1024;
constexpr double kSecondsPerPrecision = 0.33;

Tensor random_tensor(const Dims& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// Best-repetition throughput of x[1024,1024] @ W^T[1024,1024], in GFLOP/s (GOP/s for int8).
Result<double> measure_gemm(ops::Precision precision) {
  const Tensor x = random_tensor({kGemmSize, kGemmSize}, 1);
  PRISM_ASSIGN_OR_RETURN(ops::LinearWeight w,
                         ops::pack_linear(random_tensor({kGemmSize, kGemmSize}, 2), Tensor(), precision));
  ops::linear(x, w);  // warm-up: primitive creation, first touch
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double best_seconds = 1e30;
  while (std::chrono::duration<double>(clock::now() - start).count() < kSecondsPerPrecision) {
    const auto t0 = clock::now();
    ops::linear(x, w);
    best_seconds = std::min(best_seconds, std::chrono::duration<double>(clock::now() - t0).count());
  }
  return 2.0 * double(kGemmSize * kGemmSize * kGemmSize) / best_seconds * 1e-9;
}

}  // namespace

int run_info() {
  const CpuFeatures& f = cpu_features();
  const dnnl_version_t* v = dnnl_version();
  std::printf("cpu:      %s\n", f.brand.c_str());
  std::printf("features: %s\n", f.summary().c_str());
  std::printf("threads:  %d (cores: %d; PRISM_THREADS sets it)\n", num_threads(), num_cores());
  std::printf("oneDNN:   %d.%d.%d\n", v->major, v->minor, v->patch);
  std::printf("GEMM %lld³ through ops::linear:\n", static_cast<long long>(kGemmSize));
  for (ops::Precision p : {ops::Precision::f32, ops::Precision::bf16, ops::Precision::int8}) {
    Result<double> g = measure_gemm(p);
    const char* unit = p == ops::Precision::int8 ? "GOP/s" : "GFLOP/s";
    if (g) {
      std::printf("  %-5s %8.1f %s\n", std::string(ops::precision_name(p)).c_str(), *g, unit);
    } else {
      std::printf("  %-5s unavailable: %s\n", std::string(ops::precision_name(p)).c_str(),
                  g.status().to_string().c_str());
    }
  }
  return 0;
}

}  // namespace prism::app

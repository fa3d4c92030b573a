// prism info: what this machine offers Prism — CPU features, threads, oneDNN version, and
// the GEMM speed Prism's own `linear` reaches at 1024³ in each precision, measured in about
// a second (a third of a second per precision, best repetition).
#include <dnnl.hpp>

#include <cstdio>

#include "app/commands.h"
#include "runtime/cpu_features.h"
#include "runtime/gemm_peak.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::app {

constexpr int64_t kGemmSize = 1024;

int run_info() {
  const CpuFeatures& f = cpu_features();
  const dnnl_version_t* v = dnnl_version();
  std::printf("cpu:      %s\n", f.brand.c_str());
  std::printf("features: %s\n", f.summary().c_str());
  std::printf("threads:  %d (cores: %d; PRISM_THREADS sets it)\n", num_threads(), num_cores());
  std::printf("oneDNN:   %d.%d.%d\n", v->major, v->minor, v->patch);
  std::printf("GEMM %lld³ through ops::linear:\n", static_cast<long long>(kGemmSize));
  for (ops::Precision p : {ops::Precision::f32, ops::Precision::bf16, ops::Precision::int8}) {
    Result<double> g = measure_gemm_peak(p, kGemmSize);
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

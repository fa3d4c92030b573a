// prism info: what this machine offers Prism, measured in about a second.
#include <dnnl.hpp>

#include <cstdio>

#include "app/commands.h"
#include "runtime/cpu_features.h"
#include "runtime/threads.h"

namespace prism::app {

int run_info() {
  const CpuFeatures& f = cpu_features();
  const dnnl_version_t* v = dnnl_version();
  std::printf("cpu:     %s\n", f.brand.c_str());
  std::printf("features: %s\n", f.summary().c_str());
  std::printf("threads: %d (cores: %d; set PRISM_THREADS to change)\n", num_threads(), num_cores());
  std::printf("oneDNN:  %d.%d.%d\n", v->major, v->minor, v->patch);
  return 0;
}

}  // namespace prism::app

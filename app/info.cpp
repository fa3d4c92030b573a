// prism info: what this machine offers Prism — CPU features, the kernels' instruction-set tier
// and the path each op takes on it, threads, oneDNN version, and the GEMM speed Prism's own
// `linear` reaches at 1024³ in each precision on every tier the CPU can run (each tier in a
// process of its own, since oneDNN fixes its ISA once per process), measured in about a second
// per tier (a third of a second per precision, best repetition).
#include <dnnl.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/compute_wait.h"
#include "runtime/cpu_allowance.h"
#include "runtime/cpu_features.h"
#include "runtime/gemm_peak.h"
#include "runtime/isa.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

extern char** environ;

namespace prism::app {
namespace {

constexpr int64_t kGemmSize = 1024;
constexpr ops::Precision kPrecisions[] = {ops::Precision::f32, ops::Precision::bf16, ops::Precision::int8};

// "  avx2           67.0      61.2     101.9" for the tier in force.
std::string gemm_row() {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "  %-12s", std::string(isa_name(active_isa())).c_str());
  std::string row = buf;
  for (ops::Precision p : kPrecisions) {
    Result<double> g = measure_gemm_peak(p, kGemmSize);
    if (g) std::snprintf(buf, sizeof(buf), " %10.1f", *g);
    else std::snprintf(buf, sizeof(buf), " %10s", "failed");  // a bug: every tier has every precision
    row += buf;
  }
  return row;
}

// The gemm row of another tier: this executable again, with PRISM_ISA set.
std::string gemm_row_in_child(Isa isa) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "PRISM_ISA=", 10) != 0) env_strings.emplace_back(*e);
  env_strings.push_back("PRISM_ISA=" + std::string(isa_name(isa)));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe", info[] = "info", flag[] = "--this-tier-gemm";
  char* argv[] = {self, info, flag, nullptr};

  int fds[2];
  if (pipe(fds) != 0) return "  " + std::string(isa_name(isa)) + ": cannot start a measuring process";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.empty())
    return "  " + std::string(isa_name(isa)) + ": the measuring process failed";
  return out;
}

}  // namespace

int run_info(bool this_tier_gemm_only) {
  if (this_tier_gemm_only) {
    std::printf("%s\n", gemm_row().c_str());
    return 0;
  }
  const CpuFeatures& f = cpu_features();
  const Isa active = active_isa();
  const dnnl_version_t* v = dnnl_version();
  std::printf("cpu:      %s\n", f.brand.c_str());
  std::printf("features: %s\n", f.summary().c_str());
  std::printf("kernels:  %s tier%s (PRISM_ISA=", std::string(isa_name(active)).c_str(),
              active == *best_isa() ? ", the CPU's best" : ", forced by PRISM_ISA");
  bool first = true;
  for (Isa isa : all_isas())
    if (cpu_supports(isa)) std::printf("%s%s", first ? "" : "|", std::string(isa_name(isa)).c_str()), first = false;
  std::printf(" picks one)\n");
  std::printf("threads:  %d (default: %s; PRISM_THREADS sets it)\n", num_threads(), cpu_allowance().describe().c_str());
  std::printf("wait:     %s (PRISM_COMPUTE_WAIT=short_spin|passive|spin sets it)\n", compute_wait_in_force().c_str());
  std::printf("oneDNN:   %d.%d.%d\n", v->major, v->minor, v->patch);
  std::printf("paths on the %s tier:\n", std::string(isa_name(active)).c_str());
  for (ops::Precision p : kPrecisions)
    std::printf("  linear %-5s %s\n", std::string(ops::precision_name(p)).c_str(), ops::linear_path(p).c_str());
  for (ops::Precision p : {ops::Precision::f32, ops::Precision::bf16})
    std::printf("  conv2d %-5s %s\n", std::string(ops::precision_name(p)).c_str(), ops::conv2d_path(p).c_str());
  std::printf("  attention    %s\n", ops::attention_path().c_str());
  std::printf("GEMM %lld³ through ops::linear (GFLOP/s; GOP/s for int8), each tier in its own process:\n",
              static_cast<long long>(kGemmSize));
  std::printf("  %-12s %10s %10s %10s\n", "tier", "f32", "bf16", "int8");
  std::fflush(stdout);
  for (Isa isa : all_isas()) {
    if (!cpu_supports(isa)) {
      std::printf("  %-12s not run: this CPU lacks %s\n", std::string(isa_name(isa)).c_str(),
                  missing_features(isa).c_str());
      continue;
    }
    std::printf("%s\n", (isa == active ? gemm_row() : gemm_row_in_child(isa)).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace prism::app

// bench/bench_tiers.h: a bench's figures on every instruction-set tier the CPU can run, in one
// invocation. Without PRISM_ISA, run_on_each_tier re-runs this same executable (same
// arguments) once per tier the CPU supports, lowest first, with PRISM_ISA set, each child's
// output under a heading; with PRISM_ISA set it selects that tier (as tests/test_main does)
// and lets the caller run. A tier is fixed per process (runtime/isa.h), hence the children.
// Usage, first thing in main():
//   if (std::optional<int> done = prism::bench::run_on_each_tier(argc, argv)) return *done;
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runtime/isa.h"

extern char** environ;

namespace prism::bench {

// nullopt: this process runs the bench (PRISM_ISA chose its tier). Else the exit code to
// return: 0 when every child succeeded, the first failure's code otherwise; 77 (skipped)
// when PRISM_ISA names a tier the CPU cannot run.
inline std::optional<int> run_on_each_tier(int argc, char** argv) {
  const char* forced = std::getenv("PRISM_ISA");
  if (Result<Isa> best = best_isa(); !best.has_value()) {
    std::printf("SKIPPED: %s\n", best.status().message().c_str());
    return 77;
  }
  if (forced != nullptr && *forced != '\0') {
    if (Status s = select_isa_from_env(forced); !s.ok()) {
      std::printf("SKIPPED (PRISM_ISA=%s): %s\n", forced, s.message().c_str());
      return 77;
    }
    return std::nullopt;
  }
  // The children's environment: ours plus PRISM_ISA (none is set here).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.emplace_back();
  int result = 0;
  for (Isa isa : all_isas()) {
    const std::string name(isa_name(isa));
    if (!cpu_supports(isa)) {
      std::printf("\n==== tier %s: skipped, the CPU lacks %s ====\n", name.c_str(), missing_features(isa).c_str());
      continue;
    }
    std::printf("\n==== tier %s (PRISM_ISA=%s) ====\n", name.c_str(), name.c_str());
    std::fflush(stdout);
    env_strings.back() = "PRISM_ISA=" + name;
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      std::printf("could not start the %s run\n", name.c_str());
      return 1;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && code != 77) {
      std::printf("tier %s: exit code %d\n", name.c_str(), code);
      if (result == 0) result = code;
    }
  }
  (void)argc;
  return result;
}

}  // namespace prism::bench

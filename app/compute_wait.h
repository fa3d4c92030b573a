// app/compute_wait.h: how the compute pool's idle OpenMP workers wait, chosen before the pool
// exists. libgomp (Debian's OpenMP runtime, which oneDNN uses too) reads OMP_WAIT_POLICY and
// GOMP_SPINCOUNT once, in its constructor, before main(): setting them later does nothing. So
// when the policy Prism wants is not the one in force, `prism` executes itself again (execv of
// /proc/self/exe, same argv, same PID) with the variables set, once (PRISM_COMPUTE_WAIT_APPLIED
// marks the variables as Prism's own). Variables the user set themselves are respected.
// The decision is a pure function of the environment and the config (plan_compute_wait);
// reading the environment and executing live beside it, in app/ (the only layer with getenv).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace prism::app {

// The variables plan_compute_wait reads (nullopt: unset).
struct ComputeWaitEnv {
  std::optional<std::string> omp_wait_policy;     // OMP_WAIT_POLICY
  std::optional<std::string> gomp_spincount;      // GOMP_SPINCOUNT
  std::optional<std::string> prism_compute_wait;  // PRISM_COMPUTE_WAIT: passive | short_spin | spin
  std::optional<std::string> applied;             // PRISM_COMPUTE_WAIT_APPLIED: the policy Prism set
};

// What the process runs with, and what to change first.
struct ComputeWaitPlan {
  std::string policy;  // "passive", "short_spin", "spin", or "user" (OMP_WAIT_POLICY / GOMP_SPINCOUNT set by the user)
  std::string source;  // where the choice came from: "PRISM_COMPUTE_WAIT", the config key, "the default", "set by the user"
  std::string variables;  // the libgomp variables in force once the plan is applied, in words
  // Variables to set (nullopt: unset) before executing again; empty when the policy is in
  // force already (or the user's variables stand).
  std::vector<std::pair<std::string, std::optional<std::string>>> set;
  // Said once at start-up (a warning) when a Prism setting is overridden by the user's variables.
  std::string note;

  bool reexec() const { return !set.empty(); }
  // "passive (OMP_WAIT_POLICY=PASSIVE; from the default)", or for the user's variables
  // "OMP_WAIT_POLICY=ACTIVE, GOMP_SPINCOUNT unset (set by the user)".
  std::string describe() const;
};

// The policy when nothing chooses one, and short_spin's spin count (compute_wait.cpp's NOTE).
inline constexpr const char* kDefaultComputeWait = "short_spin";
inline constexpr int kShortSpinCount = 3000;

// config_value: [server] compute_wait ("" or nullopt: not set), named `config_origin` in
// messages ("prism.toml:3"). PRISM_COMPUTE_WAIT wins over the config (it is the operator's,
// per start); the user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT win over both. invalid_argument
// for a PRISM_COMPUTE_WAIT that is not a policy name.
// NOTE: idempotent: applying `set` to `env` (and setting applied) gives a plan with no `set`;
// that is what makes executing again happen at most once.
Result<ComputeWaitPlan> plan_compute_wait(const ComputeWaitEnv& env, const std::optional<std::string>& config_value,
                                          const std::string& config_origin = "[server] compute_wait");

// The process's environment (getenv).
ComputeWaitEnv read_compute_wait_env();

// Keeps argv for apply_compute_wait (main() calls it first).
void remember_argv(char** argv);

// Plans with this process's environment and executes again when the plan says so (returning
// only if that fails: it logs why and the process goes on with the policy in force). Records
// the plan for compute_wait_in_force(). Returns the planning error (a bad PRISM_COMPUTE_WAIT).
Status apply_compute_wait(const std::optional<std::string>& config_value,
                          const std::string& config_origin = "[server] compute_wait");

// The policy this process runs with, as applied; before apply_compute_wait, what the
// environment alone gives (for `prism info`).
std::string compute_wait_in_force();

}  // namespace prism::app

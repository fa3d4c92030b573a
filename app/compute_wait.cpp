// app/compute_wait.cpp: see compute_wait.h.
#include "app/compute_wait.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "serving/config.h"

namespace prism::app {
namespace {

constexpr const char* kWaitPolicy = "OMP_WAIT_POLICY";
constexpr const char* kSpinCount = "GOMP_SPINCOUNT";
constexpr const char* kApplied = "PRISM_COMPUTE_WAIT_APPLIED";
constexpr const char* kDefaultSource = "the default";

// A policy and the libgomp variables that give it (nullopt: unset).
struct Policy {
  const char* name;
  std::optional<std::string> wait_policy, spin_count;
  std::string what;  // for describe()
};

// NOTE: "spin" is libgomp's own default (both unset): idle workers spin GOMP_SPINCOUNT = 300000
// times (a few milliseconds), or 1000 times while the process has more OpenMP threads than
// CPUs, then sleep on a futex. "passive" sleeps at once (spin count 0). "short_spin" spins
// kShortSpinCount times, then sleeps: long enough to bridge the gap between two parallel regions
// of a decode step (a sleeping worker's wake-up costs tens of microseconds, and a step has
// hundreds of regions), short enough that a spinning worker gives its core back quickly to the
// thread it waits for when the machine is shared. Measured in docs/tuning.md ("Compute wait
// policy").
const Policy* find_policy(std::string_view name) {
  static const Policy kPolicies[] = {
      {"passive", std::string("PASSIVE"), std::nullopt, "OMP_WAIT_POLICY=PASSIVE"},
      {"short_spin", std::nullopt, std::to_string(kShortSpinCount),
       "GOMP_SPINCOUNT=" + std::to_string(kShortSpinCount) + ", OMP_WAIT_POLICY unset"},
      {"spin", std::nullopt, std::nullopt, "libgomp's default: OMP_WAIT_POLICY and GOMP_SPINCOUNT unset"},
  };
  for (const Policy& p : kPolicies)
    if (name == p.name) return &p;
  return nullptr;
}

std::string variables_of(const ComputeWaitEnv& env) {
  return std::string(kWaitPolicy) + (env.omp_wait_policy ? "=" + *env.omp_wait_policy : " unset") + ", " + kSpinCount +
         (env.gomp_spincount ? "=" + *env.gomp_spincount : " unset");
}

std::string policy_names() {
  std::string out;
  for (const std::string& w : serving::known_compute_waits()) out += (out.empty() ? "" : " or ") + w;
  return out;
}

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::mutex g_mu;
char** g_argv = nullptr;               // guarded by g_mu
std::optional<std::string> g_in_force;  // guarded by g_mu

}  // namespace

std::string ComputeWaitPlan::describe() const {
  if (policy == "user") return variables + " (" + source + ")";
  return policy + " (" + variables + "; from " + source + ")";
}

Result<ComputeWaitPlan> plan_compute_wait(const ComputeWaitEnv& env, const std::optional<std::string>& config_value,
                                          const std::string& config_origin) {
  // What Prism wants: PRISM_COMPUTE_WAIT, else the config, else the default.
  std::string want = kDefaultComputeWait, source = kDefaultSource;
  if (config_value && !config_value->empty()) {
    want = *config_value;
    source = config_origin;
  }
  if (env.prism_compute_wait && !env.prism_compute_wait->empty()) {
    want = *env.prism_compute_wait;
    source = "PRISM_COMPUTE_WAIT";
  }
  const Policy* p = find_policy(want);
  if (p == nullptr) return invalid_argument(source + " must be " + policy_names() + ", got '" + want + "'");

  ComputeWaitPlan plan;
  // Variables present and not the ones Prism set (by PRISM_COMPUTE_WAIT_APPLIED) are the user's.
  const Policy* applied = env.applied ? find_policy(*env.applied) : nullptr;
  const bool ours = applied != nullptr && env.omp_wait_policy == applied->wait_policy &&
                    env.gomp_spincount == applied->spin_count;
  if ((env.omp_wait_policy || env.gomp_spincount) && !ours) {
    plan.policy = "user";
    plan.source = "set by the user";
    plan.variables = variables_of(env);
    if (source != kDefaultSource)
      plan.note = "the user's " + plan.variables + " override " + source + " = \"" + want + "\"";
    return plan;
  }
  plan.policy = want;
  plan.source = source;
  plan.variables = p->what;
  if (env.omp_wait_policy == p->wait_policy && env.gomp_spincount == p->spin_count) return plan;  // in force
  if (env.applied && *env.applied == want) {
    // Prism executed itself to apply this policy and its variables are not there: never loop.
    plan.policy = "user";
    plan.source = std::string(kApplied) + " is set but its variables are not";
    plan.variables = variables_of(env);
    plan.note = "the compute wait policy \"" + want + "\" was not applied (" + plan.variables + "; " + kApplied +
                "=" + *env.applied + "): not executing again";
    return plan;
  }
  plan.set = {{kWaitPolicy, p->wait_policy}, {kSpinCount, p->spin_count}, {kApplied, want}};
  return plan;
}

ComputeWaitEnv read_compute_wait_env() {
  ComputeWaitEnv env;
  env.omp_wait_policy = env_value(kWaitPolicy);
  env.gomp_spincount = env_value(kSpinCount);
  env.prism_compute_wait = env_value("PRISM_COMPUTE_WAIT");
  env.applied = env_value(kApplied);
  return env;
}

void remember_argv(char** argv) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_argv = argv;
}

Status apply_compute_wait(const std::optional<std::string>& config_value, const std::string& config_origin) {
  const ComputeWaitEnv env = read_compute_wait_env();
  PRISM_ASSIGN_OR_RETURN(const ComputeWaitPlan plan, plan_compute_wait(env, config_value, config_origin));
  std::lock_guard<std::mutex> lock(g_mu);
  if (plan.reexec() && g_argv != nullptr) {
    for (const auto& [name, value] : plan.set) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
    std::fflush(stdout);
    std::fflush(stderr);
    execv("/proc/self/exe", g_argv);
    // Still here: the policy in force is the one the process started with.
    const int err = errno;
    for (const auto& [name, value] : std::vector<std::pair<const char*, const std::optional<std::string>*>>{
             {kWaitPolicy, &env.omp_wait_policy}, {kSpinCount, &env.gomp_spincount}, {kApplied, &env.applied}}) {
      if (*value) setenv(name, (*value)->c_str(), 1);
      else unsetenv(name);
    }
    g_in_force = variables_of(env) + " (executing /proc/self/exe again to apply " + plan.policy + " failed: " +
                 std::strerror(err) + ")";
    PRISM_LOG_WARN("compute wait policy: {}", *g_in_force);
    return {};
  }
  if (!plan.note.empty()) PRISM_LOG_WARN("compute wait policy: {}", plan.note);
  g_in_force = plan.describe();
  return {};
}

std::string compute_wait_in_force() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_in_force) return *g_in_force;
  }
  Result<ComputeWaitPlan> plan = plan_compute_wait(read_compute_wait_env(), std::nullopt);
  if (!plan.has_value()) return plan.status().message();
  if (plan->reexec()) return variables_of(read_compute_wait_env()) + " (not applied yet)";
  return plan->describe();
}

}  // namespace prism::app

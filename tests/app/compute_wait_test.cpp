// The compute pool's wait policy is decided before libgomp starts, by a pure function of the
// environment and the config: which variables to set and execute again with, or none. Tested
// without executing anything: precedence (the user's OMP variables > PRISM_COMPUTE_WAIT >
// [server] compute_wait > the default), the sentinel that makes executing again happen once,
// and errors.
#include "app/compute_wait.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

namespace prism::app {
namespace {

using Set = std::vector<std::pair<std::string, std::optional<std::string>>>;

// The environment after executing again with the plan's variables.
ComputeWaitEnv after(ComputeWaitEnv env, const ComputeWaitPlan& plan) {
  for (const auto& [name, value] : plan.set) {
    if (name == "OMP_WAIT_POLICY") env.omp_wait_policy = value;
    else if (name == "GOMP_SPINCOUNT") env.gomp_spincount = value;
    else if (name == "PRISM_COMPUTE_WAIT_APPLIED") env.applied = value;
    else ADD_FAILURE() << "unexpected variable " << name;
  }
  return env;
}

ComputeWaitPlan plan(const ComputeWaitEnv& env, std::optional<std::string> config = std::nullopt) {
  Result<ComputeWaitPlan> p = plan_compute_wait(env, config, "prism.toml:3 [server] compute_wait");
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p.has_value() ? *p : ComputeWaitPlan{};
}

TEST(ComputeWait, TheDefaultIsAShortSpinAndExecutesOnce) {
  const std::string count = std::to_string(kShortSpinCount);
  const ComputeWaitPlan first = plan({});
  EXPECT_EQ(first.policy, "short_spin");
  EXPECT_EQ(first.source, "the default");
  ASSERT_TRUE(first.reexec());
  EXPECT_EQ(first.set, (Set{{"OMP_WAIT_POLICY", std::nullopt},
                            {"GOMP_SPINCOUNT", count},
                            {"PRISM_COMPUTE_WAIT_APPLIED", "short_spin"}}));
  // The new process finds its policy in force: no second exec.
  const ComputeWaitPlan second = plan(after({}, first));
  EXPECT_FALSE(second.reexec());
  EXPECT_EQ(second.policy, "short_spin");
  EXPECT_EQ(second.describe(),
            "short_spin (GOMP_SPINCOUNT=" + count + ", OMP_WAIT_POLICY unset; from the default)");
  EXPECT_TRUE(second.note.empty());
}

TEST(ComputeWait, PassiveSleepsAtOnce) {
  ComputeWaitEnv env;
  env.prism_compute_wait = "passive";
  const ComputeWaitPlan p = plan(env);
  ASSERT_TRUE(p.reexec());
  EXPECT_EQ(p.set, (Set{{"OMP_WAIT_POLICY", "PASSIVE"},
                        {"GOMP_SPINCOUNT", std::nullopt},
                        {"PRISM_COMPUTE_WAIT_APPLIED", "passive"}}));
  EXPECT_EQ(plan(after(env, p)).describe(), "passive (OMP_WAIT_POLICY=PASSIVE; from PRISM_COMPUTE_WAIT)");
}

TEST(ComputeWait, SpinIsLibgompsDefaultAndNeedsNoExec) {
  ComputeWaitEnv env;
  env.prism_compute_wait = "spin";
  const ComputeWaitPlan p = plan(env);
  EXPECT_EQ(p.policy, "spin");
  EXPECT_EQ(p.source, "PRISM_COMPUTE_WAIT");
  EXPECT_FALSE(p.reexec());  // both variables unset already
  EXPECT_EQ(p.describe(),
            "spin (libgomp's default: OMP_WAIT_POLICY and GOMP_SPINCOUNT unset; from PRISM_COMPUTE_WAIT)");
}

TEST(ComputeWait, TheConfigChoosesUnlessPrismComputeWaitIsSet) {
  const ComputeWaitPlan from_config = plan({}, "spin");
  EXPECT_EQ(from_config.policy, "spin");
  EXPECT_EQ(from_config.source, "prism.toml:3 [server] compute_wait");
  EXPECT_FALSE(from_config.reexec());

  ComputeWaitEnv env;
  env.prism_compute_wait = "passive";
  const ComputeWaitPlan from_env = plan(env, "spin");
  EXPECT_EQ(from_env.policy, "passive");
  EXPECT_EQ(from_env.source, "PRISM_COMPUTE_WAIT");
  EXPECT_TRUE(from_env.reexec());

  // An empty value is no choice.
  env.prism_compute_wait = "";
  EXPECT_EQ(plan(env, "").policy, "short_spin");
  EXPECT_EQ(plan(env, "").source, "the default");
}

TEST(ComputeWait, TheUsersOwnVariablesAreRespected) {
  for (const auto& [wait, spin] : std::vector<std::pair<std::optional<std::string>, std::optional<std::string>>>{
           {"ACTIVE", std::nullopt}, {std::nullopt, "10000"}, {"PASSIVE", std::nullopt}, {"passive", "0"}}) {
    ComputeWaitEnv env;
    env.omp_wait_policy = wait;
    env.gomp_spincount = spin;
    const ComputeWaitPlan by_default = plan(env);
    EXPECT_FALSE(by_default.reexec());
    EXPECT_EQ(by_default.policy, "user");
    EXPECT_TRUE(by_default.note.empty());  // nothing of Prism's was overridden
    // A Prism setting they override is named in the note (a start-up warning).
    env.prism_compute_wait = "spin";
    const ComputeWaitPlan overridden = plan(env, "passive");
    EXPECT_FALSE(overridden.reexec());
    EXPECT_EQ(overridden.policy, "user");
    EXPECT_NE(overridden.note.find("PRISM_COMPUTE_WAIT = \"spin\""), std::string::npos) << overridden.note;
  }
  ComputeWaitEnv env;
  env.omp_wait_policy = "ACTIVE";
  EXPECT_EQ(plan(env).describe(), "OMP_WAIT_POLICY=ACTIVE, GOMP_SPINCOUNT unset (set by the user)");
}

TEST(ComputeWait, PrismsOwnVariablesAreReplacedWhenAnotherPolicyIsWanted) {
  // A prism started by a prism (a bench driving a server) inherits the parent's variables and
  // its sentinel: they are Prism's, not the user's, so the child's own choice applies.
  const ComputeWaitEnv inherited = after({}, plan({}));  // short_spin applied
  const ComputeWaitPlan spin = plan(inherited, "spin");
  EXPECT_EQ(spin.policy, "spin");
  ASSERT_TRUE(spin.reexec());
  EXPECT_EQ(spin.set, (Set{{"OMP_WAIT_POLICY", std::nullopt},
                           {"GOMP_SPINCOUNT", std::nullopt},
                           {"PRISM_COMPUTE_WAIT_APPLIED", "spin"}}));
  EXPECT_FALSE(plan(after(inherited, spin), "spin").reexec());
}

TEST(ComputeWait, NeverExecutesTwiceForTheSamePolicy) {
  // The sentinel says the default was applied, but its variable is missing (something stripped
  // the environment): executing again would loop.
  ComputeWaitEnv env;
  env.applied = kDefaultComputeWait;
  const ComputeWaitPlan p = plan(env);
  EXPECT_FALSE(p.reexec());
  EXPECT_FALSE(p.note.empty());
}

TEST(ComputeWait, EveryPlanIsIdempotent) {
  // For every starting environment, applying the plan gives a plan that executes nothing.
  const std::vector<std::optional<std::string>> waits = {std::nullopt, "PASSIVE", "ACTIVE"};
  const std::vector<std::optional<std::string>> spins = {std::nullopt, "1000"};
  const std::vector<std::optional<std::string>> chosen = {std::nullopt, "passive", "short_spin", "spin"};
  const std::vector<std::optional<std::string>> sentinels = {std::nullopt, "passive", "short_spin", "spin"};
  for (const auto& w : waits)
    for (const auto& s : spins)
      for (const auto& e : chosen)
        for (const auto& a : sentinels)
          for (const auto& c : chosen) {
            ComputeWaitEnv env{w, s, e, a};
            const ComputeWaitPlan first = plan(env, c);
            if (!first.reexec()) continue;
            const ComputeWaitPlan second = plan(after(env, first), c);
            EXPECT_FALSE(second.reexec()) << "wait " << w.value_or("-") << " spin " << s.value_or("-") << " env "
                                          << e.value_or("-") << " applied " << a.value_or("-") << " config "
                                          << c.value_or("-");
            EXPECT_EQ(second.policy, first.policy);
          }
}

TEST(ComputeWait, ABadPrismComputeWaitIsAnError) {
  ComputeWaitEnv env;
  env.prism_compute_wait = "active";
  Result<ComputeWaitPlan> p = plan_compute_wait(env, std::nullopt);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.status().message(), "PRISM_COMPUTE_WAIT must be passive or short_spin or spin, got 'active'");
}

}  // namespace
}  // namespace prism::app

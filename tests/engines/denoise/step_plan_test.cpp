// engines/denoise/step_plan: which requests step and with which rows, table-driven with no
// model, clock or thread: batching across steps, shape keys, the token budget, unconditional
// rows only inside the CFG interval, cancellation, deadlines and no starvation.
#include "engines/denoise/step_plan.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace prism::engines::denoise {
namespace {

// A running request: id, step, shape key, cond tokens, uncond tokens, cfg_on.
DenoiseView req(int64_t id, int step, int64_t key, int64_t cond, int64_t uncond = 0, bool cfg = false) {
  DenoiseView v;
  v.id = id;
  v.step = step;
  v.num_steps = 50;
  v.shape_key = key;
  v.cond_tokens = cond;
  v.uncond_tokens = uncond;
  v.cfg_on = cfg;
  return v;
}

// "id" for a cond-only step, "id+u" with its uncond row, "id:0" without a model pass.
std::string describe(const DenoiseStepPlan& p) {
  std::string s;
  for (const PlannedStep& q : p.steps)
    s += (s.empty() ? "" : " ") + std::to_string(q.id) + (q.run_uncond ? "+u" : "") + (q.model_pass ? "" : ":0");
  for (const auto& [id, reason] : p.finish)
    s += std::string(s.empty() ? "" : " ") + (reason == FinishReason::cancelled ? "x" : "t") + std::to_string(id);
  return s;
}

struct Case {
  const char* name;
  std::vector<DenoiseView> requests;
  int64_t budget;
  int64_t now_ms;
  const char* expected;  // describe()
  int64_t tokens;
};

TEST(DenoiseStepPlan, Table) {
  DenoiseView cancelled = req(2, 7, 0, 100);
  cancelled.cancelled = true;
  DenoiseView expired = req(3, 1, 0, 100);
  expired.deadline_ms = 1000;
  DenoiseView not_yet = req(4, 1, 0, 100);
  not_yet.deadline_ms = 1001;
  DenoiseView zero_init = req(5, 0, 9, 5000);
  zero_init.model_pass = false;
  const Case cases[] = {
      {"empty", {}, 1000, 0, "", 0},
      {"requests at different steps share a pass", {req(1, 0, 0, 100), req(2, 17, 0, 100), req(3, 49, 0, 100)},
       1000, 0, "1 2 3", 300},
      {"the oldest fixes the shape; others wait", {req(1, 3, 7, 100), req(2, 3, 8, 100), req(3, 3, 7, 100)}, 1000,
       0, "1 3", 200},
      {"uncond rows only where CFG is on", {req(1, 3, 0, 100, 90, true), req(2, 40, 0, 100, 90, false)}, 1000, 0,
       "1+u 2", 290},
      {"budget: FIFO, a misfit is skipped not a barrier",
       {req(1, 0, 0, 400), req(2, 0, 0, 300, 310, true), req(3, 0, 0, 500)}, 1000, 0, "1 3", 900},
      {"budget counts uncond rows", {req(1, 0, 0, 400, 400, true), req(2, 0, 0, 300)}, 1000, 0, "1+u", 800},
      {"an oversize oldest runs alone", {req(1, 0, 0, 5000, 5000, true), req(2, 0, 0, 10)}, 1000, 0, "1+u", 10000},
      {"a younger oversize request waits for its turn", {req(1, 0, 0, 10), req(2, 0, 0, 5000)}, 1000, 0, "1", 10},
      {"cancelled: finished, not stepped", {req(1, 0, 0, 100), cancelled}, 1000, 0, "1 x2", 100},
      {"deadline at now: finished", {expired, not_yet}, 1000, 1000, "4 t3", 100},
      {"a cancelled head does not fix the shape", {cancelled, req(6, 0, 3, 100)}, 1000, 0, "6 x2", 100},
      {"a zero-init step costs nothing and always runs", {req(1, 0, 0, 1000), zero_init}, 1000, 0, "1 5:0", 1000},
  };
  for (const Case& c : cases) {
    const DenoiseStepPlan p = plan_denoise_step(c.requests, {c.budget}, c.now_ms);
    EXPECT_EQ(describe(p), c.expected) << c.name;
    EXPECT_EQ(p.num_tokens, c.tokens) << c.name;
    int cond = 0, uncond = 0;
    for (const PlannedStep& s : p.steps) cond += s.model_pass, uncond += s.run_uncond;
    EXPECT_EQ(p.num_cond_rows, cond) << c.name;
    EXPECT_EQ(p.num_uncond_rows, uncond) << c.name;
  }
}

// NOTE's no-starvation clause, simulated: whatever the mix of shapes and sizes, applying the
// plans step after step finishes every request, and a request never waits while it is the oldest.
TEST(DenoiseStepPlan, NothingStarves) {
  std::vector<DenoiseView> running;
  for (int i = 0; i < 12; ++i) {
    DenoiseView v = req(i, 0, i % 3, 100 + 450 * (i % 4), 100, i % 2 == 0);
    v.num_steps = 4 + i % 5;
    running.push_back(v);
  }
  int iterations = 0;
  while (!running.empty()) {
    ASSERT_LT(++iterations, 1000);
    const DenoiseStepPlan p = plan_denoise_step(running, {800}, 0);
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.steps.front().id, running.front().id);  // the oldest always moves
    for (const PlannedStep& s : p.steps)
      for (DenoiseView& v : running)
        if (v.id == s.id) ++v.step;
    std::erase_if(running, [](const DenoiseView& v) { return v.step == v.num_steps; });
  }
}

}  // namespace
}  // namespace prism::engines::denoise

// engines/denoise/step_plan.cpp: plan_denoise_step.
#include "engines/denoise/step_plan.h"

#include "base/check.h"

namespace prism::engines::denoise {

DenoiseStepPlan plan_denoise_step(std::span<const DenoiseView> requests, const DenoiseLimits& limits,
                                  int64_t now_ms) {
  DenoiseStepPlan plan;
  std::optional<int64_t> key;  // the batch's shape, fixed by the oldest runnable request
  for (const DenoiseView& r : requests) {
    PRISM_CHECK(r.step >= 0 && r.step < r.num_steps);
    if (r.cancelled) {
      plan.finish.emplace_back(r.id, FinishReason::cancelled);
      continue;
    }
    if (r.deadline_ms && now_ms >= *r.deadline_ms) {
      plan.finish.emplace_back(r.id, FinishReason::deadline);
      continue;
    }
    if (!r.model_pass) {
      plan.steps.push_back({r.id, false, false});
      continue;
    }
    const int64_t cost = r.cond_tokens + (r.cfg_on ? r.uncond_tokens : 0);
    const bool first = !key.has_value();
    if (!first && (r.shape_key != *key || plan.num_tokens + cost > limits.max_step_tokens)) continue;
    key = r.shape_key;
    plan.steps.push_back({r.id, r.cfg_on, true});
    plan.num_tokens += cost;
    plan.num_cond_rows += 1;
    plan.num_uncond_rows += r.cfg_on ? 1 : 0;
  }
  return plan;
}

}  // namespace prism::engines::denoise

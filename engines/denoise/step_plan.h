// engines/denoise/step_plan.h: which running denoise requests take a step now, and with which
// rows. A pure function of plain views, a token budget and `now`: no clock, no tensors, no
// mutation; the loop applies the plan (builds the batch, runs the model, steps the samplers).
// NOTE (the invariant): between two steps, every cancelled or past-deadline request is listed
// to finish (with its reason) and none of them runs. Of the rest, in FIFO order (oldest first),
// the oldest always runs, alone if it fits nowhere else (so nothing starves: a request runs at
// the latest once every older one has finished); it fixes the batch's latent shape key, and each
// younger request of that key joins while its rows fit the token budget (one that does not fit
// is skipped, not a barrier). Requests at different steps batch together. A request's cost is
// its conditional row's tokens, plus its unconditional row's when CFG is on this step; a step
// with no model pass (CFG-Zero* zero-init) costs nothing and always runs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace prism::engines::denoise {

struct DenoiseView {
  int64_t id = 0;
  int step = 0;              // steps taken
  int num_steps = 0;         // steps in its schedule
  int64_t shape_key = 0;     // equal keys: latents of one shape, batchable in one pass
  int64_t cond_tokens = 0;   // tokens of its conditional row (latent tokens + text tokens)
  int64_t uncond_tokens = 0; // of its unconditional row
  bool cfg_on = false;       // the unconditional row runs this step (guidance.h's cfg_active)
  bool model_pass = true;    // false on a zero-init step: velocity 0, no row at all
  bool cancelled = false;
  std::optional<int64_t> deadline_ms;  // finished unstepped once now_ms >= this
};

struct DenoiseLimits {
  int64_t max_step_tokens = 16384;  // tokens over every row of one model pass
};

enum class FinishReason : uint8_t { cancelled, deadline };

struct PlannedStep {
  int64_t id = 0;
  bool run_uncond = false;  // its unconditional row joins the pass
  bool model_pass = true;   // false: no rows, the loop steps with velocity 0
};

struct DenoiseStepPlan {
  std::vector<PlannedStep> steps;  // in FIFO order; rows: every cond first, then every uncond
  std::vector<std::pair<int64_t, FinishReason>> finish;  // to finish before stepping
  int64_t num_tokens = 0;      // over the pass's rows
  int num_cond_rows = 0, num_uncond_rows = 0;
  bool empty() const { return steps.empty(); }
};

// requests: running requests in FIFO (admission) order, each with step < num_steps.
DenoiseStepPlan plan_denoise_step(std::span<const DenoiseView> requests, const DenoiseLimits& limits, int64_t now_ms);

}  // namespace prism::engines::denoise

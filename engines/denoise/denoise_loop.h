// engines/denoise/denoise_loop.h: the denoise step loop. Owns the running requests (latent,
// sampler history, guidance, conditioning, schedule) and advances them one step per call:
// plan (step_plan.h) -> one DenoiseBatch, conditional rows then unconditional rows ->
// Denoiser::predict -> guidance -> sampler step -> progress -> finished requests out.
// It does no I/O, reads no clock (now comes in) and starts no thread: the serving layer owns
// the engine thread, admission and metrics (it turns counters() into prism_denoise_steps_total
// and prism_denoise_model_passes_total{pass="cond"|"uncond"}).
// NOTE: a request's latent only changes inside step(), once per step it is planned in, from
// sigmas[step] to sigmas[step + 1]; cancellation and deadlines act between steps (a request
// listed to finish is not stepped in that call). Requests at different steps share one pass.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "base/status.h"
#include "engines/denoise/flow_schedule.h"
#include "engines/denoise/guidance.h"
#include "engines/denoise/precision_schedule.h"
#include "engines/denoise/samplers.h"
#include "engines/denoise/step_plan.h"
#include "models/denoiser.h"
#include "runtime/tensor.h"

namespace prism::engines::denoise {

struct DenoiseRequest {
  int64_t id = 0;
  Dims latent_shape;      // [C, H, W] (images) or [C, F, H, W] (video)
  uint64_t seed = 0;      // the initial noise (noise.h) unless initial_noise is given
  Tensor initial_noise;   // test hook: the initial latent, f32 latent_shape; undefined: from seed
  Tensor cond;            // [L, cond_dim] f32: the prompt's text states
  Tensor uncond;          // [L', cond_dim] f32: the negative prompt's; undefined: no guidance
  FlowSchedule schedule;  // flow_schedule.h
  SamplerOptions sampler;
  GuidanceParams guidance;
  std::optional<int64_t> deadline_ms;  // on the caller's clock (the now_ms step() gets)
};

// After each step of a request. Valid during the callback only.
struct DenoiseProgress {
  int64_t id = 0;
  int step = 0;        // the step just taken, 0-based
  int num_steps = 0;
  const Tensor* latent = nullptr;  // the latent after it, f32 latent_shape
  const Tensor* x0 = nullptr;      // the clean latent predicted at it (x - sigma v), for previews
};

struct DenoiseResult {
  int64_t id = 0;
  Status status;  // ok, cancelled or deadline_exceeded
  Tensor latent;  // f32 latent_shape: the final latent (when ok) or the latest one
  int steps_done = 0;
};

// Plain counters; the serving layer exports them. Engine thread only.
struct DenoiseCounters {
  int64_t steps = 0;          // request steps taken (one per request per planned step)
  int64_t cond_passes = 0;    // conditional rows run through the model
  int64_t uncond_passes = 0;  // unconditional rows run through the model
  int64_t model_calls = 0;    // Denoiser::predict calls (batched passes)
};

using ProgressCallback = std::function<void(const DenoiseProgress&)>;

class DenoiseLoop {
 public:
  explicit DenoiseLoop(DenoiseLimits limits = {}) : limits_(limits) {}

  // invalid_argument for an inconsistent request (shapes, schedule, guidance, a duplicate id).
  Status add(DenoiseRequest request);
  // Marks a request cancelled: step() finishes it before stepping. Unknown ids are ignored.
  void cancel(int64_t id);
  // One step of the planned requests; returns those that finished (done, cancelled, expired).
  std::vector<DenoiseResult> step(const models::Denoiser& model, int64_t now_ms);

  void set_progress_callback(ProgressCallback callback) { progress_ = std::move(callback); }
  // The precision hook: a pass then runs each range of blocks by the denoiser loaded at the
  // schedule's precision for it (begin() by block 0's, end() by the last block's), the same
  // model at other precisions, so their states are interchangeable. The step that decides is
  // the oldest planned request's: requests sharing a pass share its precisions. `models` must
  // hold every precision the schedule names, and outlive the loop; step()'s model runs
  // default_precision. Without a schedule (or a uniform one) step() runs its model whole.
  void set_precision_schedule(PrecisionSchedule schedule, std::map<ops::Precision, const models::Denoiser*> models);
  size_t num_running() const { return running_.size(); }
  const DenoiseCounters& counters() const { return counters_; }

 private:
  struct Running {
    DenoiseRequest request;
    Tensor latent;  // f32 latent_shape
    SamplerState sampler;
    int64_t shape_key = 0;
    bool cancelled = false;
    int step() const { return sampler.step; }
    int num_steps() const { return request.schedule.num_steps(); }
    double sigma() const { return request.schedule.sigmas[size_t(sampler.step)]; }
  };

  // One model pass: the batch, and per planned step its request and rows.
  struct Pass {
    models::DenoiseBatch batch;
    std::vector<Running*> stepping;  // per planned step
    std::vector<size_t> cond_row, uncond_row;
  };

  DenoiseView view_of(const Running& r) const;
  Pass build_pass(const DenoiseStepPlan& plan);
  std::vector<Tensor> run_pass(const models::Denoiser& model, const models::DenoiseBatch& batch, int step);
  void advance(Running& r, const Tensor* cond_v, const Tensor* uncond_v);
  void finish(int64_t id, Status status, std::vector<DenoiseResult>& results);
  int64_t shape_key(const Dims& shape);
  Running* find(int64_t id);

  DenoiseLimits limits_;
  std::deque<Running> running_;  // FIFO (admission order)
  std::map<std::vector<int64_t>, int64_t> shape_keys_;  // latent shape -> its key
  DenoiseCounters counters_;
  ProgressCallback progress_;
  PrecisionSchedule precision_;
  std::map<ops::Precision, const models::Denoiser*> models_;  // not owned
};

}  // namespace prism::engines::denoise

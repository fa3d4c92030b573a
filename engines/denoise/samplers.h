// engines/denoise/samplers.h: one sampler step of one request, as a function of the latent, the
// model's velocity and the schedule: the flow-matching Euler step (FlowMatchEulerDiscrete-
// Scheduler.step) and UniPC multistep for flow prediction (UniPCMultistepScheduler with
// prediction_type "flow_prediction", use_flow_sigmas, predict_x0). Per-request history is an
// explicit SamplerState the caller owns; no scheduler object, no batch, no model.
// NOTE: the velocity v follows models/denoiser.h: x_{s'} = x_s + (s' - s) v, so the data
// prediction is x0 = x - s v. Latents are f32 [any shape]; coefficients are computed in double.
#pragma once

#include <deque>
#include <span>

#include "configs/scheduler_config.h"
#include "runtime/tensor.h"

namespace prism::engines::denoise {

enum class SamplerKind : uint8_t { flow_euler, unipc };

struct SamplerOptions {
  SamplerKind kind = SamplerKind::flow_euler;
  int solver_order = 2;           // UniPC: 1..3
  bool bh2 = true;                // UniPC: B(h) = e^-h - 1 (bh2) or -h (bh1)
  bool lower_order_final = true;  // UniPC: the last steps drop to the orders that remain
  std::vector<int64_t> disable_corrector;  // UniPC: steps whose corrector is skipped
};

// The sampler a scheduler_config.json names.
SamplerOptions sampler_options(const configs::SchedulerConfig& config);

// A request's sampler history. Engine thread only; one per request.
struct SamplerState {
  int step = 0;                 // steps taken (the index of the next sigma pair)
  // UniPC only:
  std::deque<Tensor> x0s;       // the last solver_order data predictions, newest last, f32
  Tensor last_sample;           // the latent before the previous predictor, f32
  int lower_order_nums = 0;     // steps of history warmed up (<= solver_order)
  int this_order = 0;           // the order the previous predictor used (its corrector's)
};

// x0 = x - sigma v, f32, shaped as x.
Tensor predicted_x0(const Tensor& x, const Tensor& v, double sigma);

// x + (sigma_next - sigma) v: the Euler step. x, v: f32, the same shape. Returns a new tensor.
Tensor euler_step(const Tensor& x, const Tensor& v, double sigma, double sigma_next);

// One step from sigmas[state.step] to sigmas[state.step + 1]; advances state. sigmas: the
// request's FlowSchedule::sigmas (num_steps + 1). Returns the new latent.
Tensor sampler_step(const SamplerOptions& options, SamplerState& state, std::span<const double> sigmas,
                    const Tensor& x, const Tensor& v);

}  // namespace prism::engines::denoise

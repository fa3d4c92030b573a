// engines/denoise/flow_schedule.h: the noise levels a flow-matching request walks through, as
// diffusers' schedulers compute them in set_timesteps (FlowMatchEulerDiscreteScheduler; UniPC
// with flow sigmas), and the pipelines' mu (calculate_shift) for resolution-dependent shifting.
// Pure functions of a SchedulerConfig and a request's step count: no tensors, no model.
// NOTE: sigmas run from ~1 (noise) down to the terminal 0 (data) and hold num_steps + 1 values,
// the last being the terminal; step i moves the latent from sigmas[i] to sigmas[i + 1].
// Computed in double: diffusers computes the same formulas in float32, so its values differ
// from these by a few float32 ulps (tests/reference/denoise_samplers.py restates them in float64).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"
#include "configs/scheduler_config.h"

namespace prism::engines::denoise {

struct FlowSchedule {
  std::vector<double> sigmas;     // num_steps + 1: the noise levels, then the terminal
  std::vector<double> timesteps;  // num_steps: sigma * num_train_timesteps (UniPC: truncated)
  int num_steps() const { return int(timesteps.size()); }
};

struct ScheduleRequest {
  int num_steps = 0;
  std::optional<double> mu{};  // required when the config uses dynamic shifting
  std::vector<double> sigmas{};  // custom unshifted sigmas (the pipeline's `sigmas`); empty: default
};

// set_timesteps(num_steps, sigmas, mu) of the config's scheduler class. invalid_argument for a
// step count < 1, custom sigmas of another length, a missing mu, or sigmas the shift cannot take.
Result<FlowSchedule> make_flow_schedule(const configs::SchedulerConfig& config, const ScheduleRequest& request);

// The pipelines' calculate_shift: mu on the line through (base_image_seq_len, base_shift) and
// (max_image_seq_len, max_shift), at image_seq_len latent tokens (after patching).
double calculate_shift(int64_t image_seq_len, const configs::SchedulerConfig& config);

// pipeline_z_image.py's default custom sigmas: num_steps values evenly spaced from 1 down to
// 1 / num_steps (the scheduler then shifts them). Pipelines before diffusers PR #13730 set
// sigma_min = 0 instead, so their N steps were these N - 1 plus a zero-length step at sigma 0
// (a wasted pass: Z-Image-Turbo's "9 steps" are z_image_default_sigmas(8)).
std::vector<double> z_image_default_sigmas(int num_steps);

// Z-Image's image_seq_len for a latent of height x width cells: its 2 x 2 patches.
inline int64_t z_image_seq_len(int64_t latent_height, int64_t latent_width) {
  return (latent_height / 2) * (latent_width / 2);
}

}  // namespace prism::engines::denoise

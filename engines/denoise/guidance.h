// engines/denoise/guidance.h: classifier-free guidance, i.e. how a request's conditional and
// unconditional velocities become the one the sampler steps with, and on which steps the
// unconditional pass runs at all. Pure functions of per-request tensors and parameters; a
// negative prompt is simply the unconditional conditioning (the engine treats it as data).
// NOTE: guidance is on at step i of N (the unconditional row runs) iff guidance_scale != 1, the
// request has an unconditional conditioning, int(interval_start N) <= i < int(interval_stop N),
// and, with Z-Image's cfg_truncation <= 1, 1 - sigma_i <= cfg_truncation. During CFG-Zero*'s
// zero-init steps no row runs: the velocity is 0.
// Order when on: CFG-Zero* rescales uncond; CFG combines; Z-Image's cfg_normalization caps the
// norm; guidance_rescale mixes in the std-matched prediction.
#pragma once

#include <optional>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::engines::denoise {

struct GuidanceParams {
  // w in uncond + w (cond - uncond); 1 = unguided. Z-Image's pipeline writes pos + g (pos - neg):
  // its guidance_scale g is w = 1 + g here.
  double guidance_scale = 1.0;
  double interval_start = 0.0;  // the CFG interval, fractions of the step count
  double interval_stop = 1.0;
  // Z-Image: guidance off where 1 - sigma > this (only when <= 1). The pipeline compares
  // (1000 - t) / 1000 in float32; here 1 - sigma in double (they differ only within ~1e-7 of it).
  std::optional<double> cfg_truncation;
  double cfg_normalization = 0.0;  // Z-Image: > 0 caps ||guided|| at this x ||cond||
  bool cfg_zero_star = false;      // CFG-Zero*: uncond scaled by <cond, uncond> / ||uncond||^2
  // CFG-Zero* zero-init: the first K steps use velocity 0 (the CFG-Zero* code's zero_steps is
  // K - 1: it zeroes steps i <= zero_steps, and its default 0 is K = 1).
  int zero_init_steps = 0;
  double guidance_rescale = 0.0;   // diffusers' rescale_noise_cfg phi, in [0, 1]

  Status validate() const;  // invalid_argument naming the field
};

// Whether the unconditional pass runs at step `step` of `num_steps` at noise level sigma.
bool cfg_active(const GuidanceParams& g, bool has_uncond, int step, int num_steps, double sigma);
// Whether step `step` is a zero-init step (no model pass, velocity 0).
inline bool zero_init_step(const GuidanceParams& g, int step) { return step < g.zero_init_steps; }

// The guided velocity of one request (cond, uncond: f32, the same shape): the NOTE's order.
Tensor guide(const GuidanceParams& g, const Tensor& cond, const Tensor& uncond);

// Building blocks, each over one request's whole tensor (f32, contiguous).
// u + w (cond - u) with u = uncond_scale * uncond (CFG-Zero* passes its scale; plain CFG 1).
Tensor cfg_combine(const Tensor& cond, const Tensor& uncond, double w, double uncond_scale = 1.0);
// CFG-Zero*'s optimized scale <cond, uncond> / (||uncond||^2 + 1e-8).
double cfg_zero_star_scale(const Tensor& cond, const Tensor& uncond);
// Scales pred in place so that ||pred|| <= factor ||cond|| (pipeline_z_image.py's renormalization).
void cap_norm(Tensor& pred, const Tensor& cond, double factor);
// diffusers' rescale_noise_cfg: phi pred std(cond) / std(pred) + (1 - phi) pred, with the
// unbiased std over the whole tensor. In place.
void rescale_noise_cfg(Tensor& pred, const Tensor& cond, double phi);

}  // namespace prism::engines::denoise

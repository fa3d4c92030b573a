// engines/denoise/flow_schedule.cpp: the schedules of FlowMatchEulerDiscreteScheduler and of
// UniPCMultistepScheduler with use_flow_sigmas.
#include "engines/denoise/flow_schedule.h"

#include <cmath>
#include <string>

namespace prism::engines::denoise {
namespace {

using configs::SchedulerClass;
using configs::SchedulerConfig;
using configs::TimeShift;

std::vector<double> linspace(double a, double b, int n) {
  std::vector<double> v(size_t(n), a);
  for (int i = 1; i < n; ++i) v[size_t(i)] = a + i * (b - a) / (n - 1);
  return v;
}

double static_shift(double shift, double s) { return shift * s / (1.0 + (shift - 1.0) * s); }

double time_shift(TimeShift kind, double mu, double t) {
  if (kind == TimeShift::exponential) return std::exp(mu) / (std::exp(mu) + (1.0 / t - 1.0));
  return mu / (mu + (1.0 / t - 1.0));
}

// Static or dynamic shift, then the terminal stretch: what both schedulers apply to the raw sigmas.
Status shift_sigmas(const SchedulerConfig& c, const ScheduleRequest& r, std::vector<double>& sigmas) {
  if (c.use_dynamic_shifting && !r.mu) return invalid_argument("the scheduler shifts dynamically: mu is required");
  for (double& s : sigmas) {
    if (c.use_dynamic_shifting && !(s > 0))
      return invalid_argument("dynamic shifting needs sigmas > 0, got " + std::to_string(s));
    s = c.use_dynamic_shifting ? time_shift(c.time_shift_type, *r.mu, s) : static_shift(c.shift, s);
  }
  if (c.shift_terminal) {
    // Rescale 1 - sigma so that the last sigma lands on shift_terminal.
    const double scale = (1.0 - sigmas.back()) / (1.0 - *c.shift_terminal);
    if (!(scale != 0)) return invalid_argument("shift_terminal cannot stretch a schedule ending at sigma 1");
    for (double& s : sigmas) s = 1.0 - (1.0 - s) / scale;
  }
  return Status();
}

Result<FlowSchedule> flow_match_euler(const SchedulerConfig& c, const ScheduleRequest& r) {
  const double n_train = double(c.num_train_timesteps);
  std::vector<double> sigmas = r.sigmas;
  if (sigmas.empty()) {
    // The training table's ends (shifted once already when the shift is static), spaced evenly
    // and shifted again below: diffusers' default schedule, double shift included.
    double sigma_max = 1.0, sigma_min = 1.0 / n_train;
    if (!c.use_dynamic_shifting) sigma_max = static_shift(c.shift, sigma_max), sigma_min = static_shift(c.shift, sigma_min);
    sigmas = linspace(sigma_max * n_train, sigma_min * n_train, r.num_steps);
    for (double& s : sigmas) s /= n_train;
  }
  PRISM_RETURN_IF_ERROR(shift_sigmas(c, r, sigmas));
  FlowSchedule out;
  if (c.invert_sigmas)
    for (double& s : sigmas) s = 1.0 - s;
  for (double s : sigmas) out.timesteps.push_back(s * n_train);
  out.sigmas = std::move(sigmas);
  out.sigmas.push_back(c.invert_sigmas ? 1.0 : 0.0);
  return out;
}

Result<FlowSchedule> unipc_flow(const SchedulerConfig& c, const ScheduleRequest& r) {
  const double n_train = double(c.num_train_timesteps);
  std::vector<double> sigmas = r.sigmas;
  if (sigmas.empty()) {
    sigmas = linspace(1.0, 1.0 / n_train, r.num_steps + 1);
    sigmas.pop_back();
  }
  PRISM_RETURN_IF_ERROR(shift_sigmas(c, r, sigmas));
  // Keeps log((1 - sigma) / sigma) finite at the first step.
  if (std::fabs(sigmas[0] - 1.0) < 1e-6) sigmas[0] -= 1e-6;
  FlowSchedule out;
  for (double s : sigmas) out.timesteps.push_back(std::trunc(s * n_train));  // diffusers casts to int64
  const double last = c.final_sigma_min ? sigmas.back() : 0.0;
  out.sigmas = std::move(sigmas);
  out.sigmas.push_back(last);
  return out;
}

}  // namespace

Result<FlowSchedule> make_flow_schedule(const SchedulerConfig& config, const ScheduleRequest& request) {
  if (request.num_steps < 1)
    return invalid_argument("num_inference_steps must be at least 1, got " + std::to_string(request.num_steps));
  if (!request.sigmas.empty() && int(request.sigmas.size()) != request.num_steps)
    return invalid_argument("custom sigmas hold " + std::to_string(request.sigmas.size()) + " values for " +
                            std::to_string(request.num_steps) + " steps");
  for (double s : request.sigmas)
    if (!(s >= 0 && s <= 1)) return invalid_argument("custom sigmas must lie in [0, 1], got " + std::to_string(s));
  return config.scheduler_class == SchedulerClass::unipc ? unipc_flow(config, request)
                                                         : flow_match_euler(config, request);
}

double calculate_shift(int64_t image_seq_len, const SchedulerConfig& c) {
  const double slope = (c.max_shift - c.base_shift) / double(c.max_image_seq_len - c.base_image_seq_len);
  return double(image_seq_len) * slope + (c.base_shift - slope * double(c.base_image_seq_len));
}

std::vector<double> z_image_default_sigmas(int num_steps) {
  return linspace(1.0, 1.0 / num_steps, num_steps);
}

}  // namespace prism::engines::denoise

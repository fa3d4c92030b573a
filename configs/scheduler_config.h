// configs/scheduler_config.h: a diffusers pipeline's scheduler/scheduler_config.json, typed and
// validated: the noise schedule and sampler hyper-parameters of a flow-matching model
// (FlowMatchEulerDiscreteScheduler: Z-Image, FLUX, SD3, LTX; UniPCMultistepScheduler with
// flow sigmas: Wan). Tensor-free: it must not include runtime/, formats/, models/ or engines/;
// engines/denoise/flow_schedule turns it into sigmas.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "configs/hf_config.h"

namespace prism::configs {

enum class SchedulerClass : uint8_t { flow_match_euler, unipc };
enum class TimeShift : uint8_t { exponential, linear };

// Keys as diffusers names them; defaults are diffusers' __init__ defaults.
struct SchedulerConfig {
  SchedulerClass scheduler_class = SchedulerClass::flow_match_euler;  // "_class_name"
  int64_t num_train_timesteps = 1000;
  // FlowMatchEulerDiscreteScheduler "shift"; UniPCMultistepScheduler "flow_shift".
  double shift = 1.0;
  bool use_dynamic_shifting = false;  // shift by mu (the pipeline's calculate_shift) instead
  double base_shift = 0.5;            // mu at base_image_seq_len
  double max_shift = 1.15;            // mu at max_image_seq_len
  int64_t base_image_seq_len = 256;
  int64_t max_image_seq_len = 4096;
  TimeShift time_shift_type = TimeShift::exponential;
  std::optional<double> shift_terminal;  // stretch so the last sigma is this (null / 0: off)
  bool invert_sigmas = false;            // FlowMatchEuler only: sigmas 1 - s, terminal 1
  // UniPC (flow_prediction, use_flow_sigmas, predict_x0 are required).
  int solver_order = 2;
  bool bh2 = true;                // solver_type "bh2" (true) or "bh1"
  bool lower_order_final = true;  // first-order last step
  bool final_sigma_min = false;   // final_sigmas_type "sigma_min" (true) or "zero"
  std::vector<int64_t> disable_corrector;  // step indices whose corrector is skipped

  // not_found / invalid_argument naming the key for a missing or bad value; unimplemented for
  // a scheduler or option Prism does not run (karras / exponential / beta sigmas, stochastic
  // sampling, epsilon or v prediction, thresholding, solver_p).
  static Result<SchedulerConfig> from_hf(const HfConfig& hf);
  // dir/scheduler_config.json (dir may be the pipeline root: dir/scheduler/...), or a .json path.
  static Result<SchedulerConfig> load(const std::string& dir_or_file);
  Status validate() const;
};

std::string_view scheduler_class_name(SchedulerClass c);  // diffusers' _class_name

}  // namespace prism::configs

// configs/scheduler_config.cpp: SchedulerConfig, scheduler_config.json keys as diffusers'
// FlowMatchEulerDiscreteScheduler and UniPCMultistepScheduler name them, with their defaults.
#include "configs/scheduler_config.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/file.h"

namespace prism::configs {
namespace {

constexpr char kFlowMatchEuler[] = "FlowMatchEulerDiscreteScheduler";
constexpr char kUniPc[] = "UniPCMultistepScheduler";

// Options Prism refuses rather than silently ignoring: a schedule that differs from what the
// checkpoint was tuned with would give wrong images with no error.
Status refuse_true(const HfConfig& hf, const std::string& key, const std::string& why) {
  PRISM_ASSIGN_OR_RETURN(const bool on, hf.get_bool(key, false));
  if (on) return unimplemented(hf.origin() + ": " + key + " is not supported" + why);
  return Status();
}

Status read_shift_options(const HfConfig& hf, SchedulerConfig& c) {
  PRISM_ASSIGN_OR_RETURN(c.num_train_timesteps, hf.get_int("num_train_timesteps", 1000));
  PRISM_ASSIGN_OR_RETURN(c.use_dynamic_shifting, hf.get_bool("use_dynamic_shifting", false));
  // null means "the default" for these (diffusers types them Optional).
  PRISM_ASSIGN_OR_RETURN(c.base_shift, hf.get_float("base_shift", 0.5));
  PRISM_ASSIGN_OR_RETURN(c.max_shift, hf.get_float("max_shift", 1.15));
  PRISM_ASSIGN_OR_RETURN(c.base_image_seq_len, hf.get_int("base_image_seq_len", 256));
  PRISM_ASSIGN_OR_RETURN(c.max_image_seq_len, hf.get_int("max_image_seq_len", 4096));
  PRISM_ASSIGN_OR_RETURN(const std::string shift_type, hf.get_string("time_shift_type", "exponential"));
  if (shift_type == "exponential") {
    c.time_shift_type = TimeShift::exponential;
  } else if (shift_type == "linear") {
    c.time_shift_type = TimeShift::linear;
  } else {
    return invalid_argument(hf.origin() + ": time_shift_type '" + shift_type + "' is not exponential or linear");
  }
  PRISM_ASSIGN_OR_RETURN(const double terminal, hf.get_float("shift_terminal", 0.0));
  // diffusers tests `if shift_terminal:`, so 0 is off like null.
  if (terminal != 0.0) c.shift_terminal = terminal;
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"})
    PRISM_RETURN_IF_ERROR(refuse_true(hf, key, " (flow-matching checkpoints use the shifted linear schedule)"));
  return Status();
}

Status read_unipc(const HfConfig& hf, SchedulerConfig& c) {
  PRISM_ASSIGN_OR_RETURN(c.shift, hf.get_float("flow_shift", 1.0));
  PRISM_ASSIGN_OR_RETURN(const std::string prediction, hf.get_string("prediction_type", "epsilon"));
  if (prediction != "flow_prediction")
    return unimplemented(hf.origin() + ": UniPC prediction_type '" + prediction +
                         "' is not supported (flow_prediction)");
  PRISM_ASSIGN_OR_RETURN(const bool flow_sigmas, hf.get_bool("use_flow_sigmas", false));
  if (!flow_sigmas) return unimplemented(hf.origin() + ": UniPC without use_flow_sigmas is not supported");
  PRISM_ASSIGN_OR_RETURN(const bool predict_x0, hf.get_bool("predict_x0", true));
  if (!predict_x0)
    return unimplemented(hf.origin() + ": UniPC predict_x0 false is not supported with flow_prediction");
  PRISM_RETURN_IF_ERROR(refuse_true(hf, "thresholding", " (dynamic thresholding)"));
  if (hf.has("solver_p")) return unimplemented(hf.origin() + ": UniPC solver_p is not supported");
  PRISM_ASSIGN_OR_RETURN(const int64_t order, hf.get_int("solver_order", 2));
  if (order < 1 || order > 3)
    return invalid_argument(hf.origin() + ": solver_order must be 1, 2 or 3, got " + std::to_string(order));
  c.solver_order = int(order);
  PRISM_ASSIGN_OR_RETURN(std::string solver_type, hf.get_string("solver_type", "bh2"));
  // diffusers maps the DPM-Solver names onto bh2.
  if (solver_type == "midpoint" || solver_type == "heun" || solver_type == "logrho") solver_type = "bh2";
  if (solver_type != "bh1" && solver_type != "bh2")
    return invalid_argument(hf.origin() + ": solver_type '" + solver_type + "' is not bh1 or bh2");
  c.bh2 = solver_type == "bh2";
  PRISM_ASSIGN_OR_RETURN(c.lower_order_final, hf.get_bool("lower_order_final", true));
  PRISM_ASSIGN_OR_RETURN(const std::string final_type, hf.get_string("final_sigmas_type", "zero"));
  if (final_type != "zero" && final_type != "sigma_min")
    return invalid_argument(hf.origin() + ": final_sigmas_type '" + final_type + "' is not zero or sigma_min");
  c.final_sigma_min = final_type == "sigma_min";
  if (hf.has("disable_corrector")) {
    PRISM_ASSIGN_OR_RETURN(c.disable_corrector, hf.get_ints("disable_corrector"));
  }
  return Status();
}

}  // namespace

std::string_view scheduler_class_name(SchedulerClass c) {
  return c == SchedulerClass::unipc ? kUniPc : kFlowMatchEuler;
}

Result<SchedulerConfig> SchedulerConfig::from_hf(const HfConfig& hf) {
  SchedulerConfig c;
  PRISM_ASSIGN_OR_RETURN(const std::string cls, hf.get_string("_class_name"));
  if (cls == kFlowMatchEuler) {
    c.scheduler_class = SchedulerClass::flow_match_euler;
    PRISM_ASSIGN_OR_RETURN(c.shift, hf.get_float("shift", 1.0));
    PRISM_ASSIGN_OR_RETURN(c.invert_sigmas, hf.get_bool("invert_sigmas", false));
    PRISM_RETURN_IF_ERROR(refuse_true(hf, "stochastic_sampling", " (deterministic flow sampling only)"));
  } else if (cls == kUniPc) {
    c.scheduler_class = SchedulerClass::unipc;
    PRISM_RETURN_IF_ERROR(read_unipc(hf, c));
  } else {
    return unimplemented(hf.origin() + ": scheduler '" + cls + "' is not supported (" + kFlowMatchEuler + ", " +
                         kUniPc + ")");
  }
  PRISM_RETURN_IF_ERROR(read_shift_options(hf, c));
  PRISM_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<SchedulerConfig> SchedulerConfig::load(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string path = dir_or_file;
  if (fs::is_directory(path, ec)) {
    const fs::path nested = fs::path(path) / "scheduler" / "scheduler_config.json";
    path = fs::exists(nested, ec) ? nested.string() : (fs::path(path) / "scheduler_config.json").string();
  }
  Result<std::string> text = read_file(path);
  if (!text)
    return Status(text.status().code(), text.status().message() + ": no readable scheduler_config.json there");
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::parse(*text, path));
  return from_hf(hf);
}

Status SchedulerConfig::validate() const {
  const std::string where = "scheduler_config.json: ";
  if (num_train_timesteps < 1)
    return invalid_argument(where + "num_train_timesteps must be positive, got " + std::to_string(num_train_timesteps));
  if (!(shift > 0))
    return invalid_argument(where + (scheduler_class == SchedulerClass::unipc ? "flow_shift" : "shift") +
                            " must be positive, got " + std::to_string(shift));
  if (use_dynamic_shifting) {
    if (max_image_seq_len == base_image_seq_len)
      return invalid_argument(where + "max_image_seq_len must differ from base_image_seq_len");
    if (time_shift_type == TimeShift::linear && !(base_shift > 0 && max_shift > 0))
      return invalid_argument(where + "a linear time shift needs positive base_shift and max_shift");
  }
  if (shift_terminal && !(*shift_terminal > 0 && *shift_terminal < 1))
    return invalid_argument(where + "shift_terminal must be in (0, 1), got " + std::to_string(*shift_terminal));
  if (solver_order < 1 || solver_order > 3)
    return invalid_argument(where + "solver_order must be 1, 2 or 3, got " + std::to_string(solver_order));
  for (int64_t i : disable_corrector)
    if (i < 0) return invalid_argument(where + "disable_corrector holds a negative step " + std::to_string(i));
  return Status();
}

}  // namespace prism::configs

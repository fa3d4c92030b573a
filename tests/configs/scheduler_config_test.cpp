// configs/scheduler_config: diffusers' scheduler_config.json keys for the flow-matching
// schedulers (FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler with flow sigmas), their
// defaults, and clear errors for bad values and for options Prism does not run.
#include "configs/scheduler_config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace prism::configs {
namespace {

// Z-Image-Turbo's scheduler/scheduler_config.json.
constexpr char kZImage[] = R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.36.0.dev0",
  "num_train_timesteps": 1000, "use_dynamic_shifting": false, "shift": 3.0})";

// FLUX.1-dev's.
constexpr char kFlux[] = R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.30.0.dev0",
  "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
  "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": true})";

// An LTX-Video-style one (linear time shift, stretched to a terminal sigma).
constexpr char kLtx[] = R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.32.0",
  "base_image_seq_len": 1024, "base_shift": 0.95, "invert_sigmas": false, "max_image_seq_len": 4096,
  "max_shift": 2.05, "num_train_timesteps": 1000, "shift": 1.0, "shift_terminal": 0.1, "time_shift_type": "linear",
  "use_beta_sigmas": false, "use_dynamic_shifting": true, "use_exponential_sigmas": false, "use_karras_sigmas": false})";

// Wan2.1-T2V's (UniPC, flow prediction).
constexpr char kWan[] = R"({"_class_name": "UniPCMultistepScheduler", "_diffusers_version": "0.33.0.dev0",
  "beta_end": 0.02, "beta_schedule": "linear", "beta_start": 0.0001, "disable_corrector": [],
  "dynamic_thresholding_ratio": 0.995, "final_sigmas_type": "zero", "flow_shift": 3.0, "lower_order_final": true,
  "num_train_timesteps": 1000, "predict_x0": true, "prediction_type": "flow_prediction",
  "rescale_betas_zero_snr": false, "sample_max_value": 1.0, "solver_order": 2, "solver_p": null,
  "solver_type": "bh2", "steps_offset": 0, "thresholding": false, "timestep_spacing": "linspace",
  "trained_betas": null, "use_beta_sigmas": false, "use_exponential_sigmas": false, "use_flow_sigmas": true,
  "use_karras_sigmas": false})";

Result<SchedulerConfig> parse(const std::string& json) {
  auto hf = HfConfig::parse(json, "scheduler_config.json");
  if (!hf) return hf.status();
  return SchedulerConfig::from_hf(*hf);
}

std::string edited(std::string json, const std::string& from, const std::string& to) {
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) json.replace(at, from.size(), to);
  return json;
}

TEST(SchedulerConfig, ZImageTurbo) {
  auto c = parse(kZImage);
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->scheduler_class, SchedulerClass::flow_match_euler);
  EXPECT_EQ(c->num_train_timesteps, 1000);
  EXPECT_DOUBLE_EQ(c->shift, 3.0);
  EXPECT_FALSE(c->use_dynamic_shifting);
  // Absent keys take diffusers' defaults (the pipeline's calculate_shift reads them too).
  EXPECT_DOUBLE_EQ(c->base_shift, 0.5);
  EXPECT_DOUBLE_EQ(c->max_shift, 1.15);
  EXPECT_EQ(c->base_image_seq_len, 256);
  EXPECT_EQ(c->max_image_seq_len, 4096);
  EXPECT_EQ(c->time_shift_type, TimeShift::exponential);
  EXPECT_FALSE(c->shift_terminal.has_value());
  EXPECT_FALSE(c->invert_sigmas);
}

TEST(SchedulerConfig, FluxDynamicShifting) {
  auto c = parse(kFlux);
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_TRUE(c->use_dynamic_shifting);
  EXPECT_DOUBLE_EQ(c->max_shift, 1.15);
}

TEST(SchedulerConfig, LtxLinearShiftToATerminal) {
  auto c = parse(kLtx);
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->time_shift_type, TimeShift::linear);
  ASSERT_TRUE(c->shift_terminal.has_value());
  EXPECT_DOUBLE_EQ(*c->shift_terminal, 0.1);
  EXPECT_EQ(c->base_image_seq_len, 1024);
  EXPECT_DOUBLE_EQ(c->max_shift, 2.05);
}

TEST(SchedulerConfig, WanUniPc) {
  auto c = parse(kWan);
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->scheduler_class, SchedulerClass::unipc);
  EXPECT_DOUBLE_EQ(c->shift, 3.0);  // flow_shift
  EXPECT_EQ(c->solver_order, 2);
  EXPECT_TRUE(c->bh2);
  EXPECT_TRUE(c->lower_order_final);
  EXPECT_FALSE(c->final_sigma_min);
  EXPECT_TRUE(c->disable_corrector.empty());
  EXPECT_EQ(scheduler_class_name(c->scheduler_class), "UniPCMultistepScheduler");
}

TEST(SchedulerConfig, UniPcOptions) {
  auto c = parse(edited(edited(edited(kWan, R"("solver_type": "bh2")", R"("solver_type": "bh1")"),
                               R"("final_sigmas_type": "zero")", R"("final_sigmas_type": "sigma_min")"),
                        R"("disable_corrector": [])", R"("disable_corrector": [0, 3])"));
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_FALSE(c->bh2);
  EXPECT_TRUE(c->final_sigma_min);
  EXPECT_EQ(c->disable_corrector, (std::vector<int64_t>{0, 3}));
  // DPM-Solver's names map onto bh2, as in diffusers.
  auto m = parse(edited(kWan, R"("solver_type": "bh2")", R"("solver_type": "midpoint")"));
  ASSERT_TRUE(m) << m.status().to_string();
  EXPECT_TRUE(m->bh2);
}

TEST(SchedulerConfig, NullAndZeroShiftTerminalAreOff) {
  for (const char* v : {"null", "0", "0.0"}) {
    auto c = parse(edited(kLtx, R"("shift_terminal": 0.1)", std::string(R"("shift_terminal": )") + v));
    ASSERT_TRUE(c) << v << ": " << c.status().to_string();
    EXPECT_FALSE(c->shift_terminal.has_value()) << v;
  }
}

struct BadCase {
  const char* name;
  const char* base;
  const char* from;
  const char* to;
  StatusCode code;
  const char* mentions;  // the message names the key
};

TEST(SchedulerConfig, ClearErrors) {
  const BadCase cases[] = {
      {"karras", kZImage, R"("shift": 3.0)", R"("shift": 3.0, "use_karras_sigmas": true)", StatusCode::unimplemented,
       "use_karras_sigmas"},
      {"exponential", kZImage, R"("shift": 3.0)", R"("shift": 3.0, "use_exponential_sigmas": true)",
       StatusCode::unimplemented, "use_exponential_sigmas"},
      {"beta", kZImage, R"("shift": 3.0)", R"("shift": 3.0, "use_beta_sigmas": true)", StatusCode::unimplemented,
       "use_beta_sigmas"},
      {"stochastic", kZImage, R"("shift": 3.0)", R"("shift": 3.0, "stochastic_sampling": true)",
       StatusCode::unimplemented, "stochastic_sampling"},
      {"other scheduler", kZImage, "FlowMatchEulerDiscreteScheduler", "EulerDiscreteScheduler",
       StatusCode::unimplemented, "EulerDiscreteScheduler"},
      {"negative shift", kZImage, R"("shift": 3.0)", R"("shift": -1.0)", StatusCode::invalid_argument, "shift"},
      {"shift as text", kZImage, R"("shift": 3.0)", R"("shift": "3")", StatusCode::invalid_argument, "shift"},
      {"zero timesteps", kZImage, R"("num_train_timesteps": 1000)", R"("num_train_timesteps": 0)",
       StatusCode::invalid_argument, "num_train_timesteps"},
      {"time shift type", kLtx, R"("time_shift_type": "linear")", R"("time_shift_type": "cosine")",
       StatusCode::invalid_argument, "time_shift_type"},
      {"terminal past 1", kLtx, R"("shift_terminal": 0.1)", R"("shift_terminal": 1.5)", StatusCode::invalid_argument,
       "shift_terminal"},
      {"equal seq lens", kFlux, R"("max_image_seq_len": 4096)", R"("max_image_seq_len": 256)",
       StatusCode::invalid_argument, "max_image_seq_len"},
      {"epsilon unipc", kWan, R"("prediction_type": "flow_prediction")", R"("prediction_type": "epsilon")",
       StatusCode::unimplemented, "prediction_type"},
      {"unipc without flow sigmas", kWan, R"("use_flow_sigmas": true)", R"("use_flow_sigmas": false)",
       StatusCode::unimplemented, "use_flow_sigmas"},
      {"thresholding", kWan, R"("thresholding": false)", R"("thresholding": true)", StatusCode::unimplemented,
       "thresholding"},
      {"solver order", kWan, R"("solver_order": 2)", R"("solver_order": 4)", StatusCode::invalid_argument,
       "solver_order"},
      {"solver type", kWan, R"("solver_type": "bh2")", R"("solver_type": "bh3")", StatusCode::invalid_argument,
       "solver_type"},
      {"final sigmas", kWan, R"("final_sigmas_type": "zero")", R"("final_sigmas_type": "max")",
       StatusCode::invalid_argument, "final_sigmas_type"},
      {"predict noise", kWan, R"("predict_x0": true)", R"("predict_x0": false)", StatusCode::unimplemented,
       "predict_x0"},
  };
  for (const BadCase& c : cases) {
    auto r = parse(edited(c.base, c.from, c.to));
    ASSERT_FALSE(r) << c.name;
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.mentions), std::string::npos) << c.name << ": " << r.status().to_string();
  }
  auto missing = parse(R"({"shift": 3.0})");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("_class_name"), std::string::npos) << missing.status().to_string();
}

TEST(SchedulerConfig, LoadsFromAPipelineDirectory) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("prism_scheduler_config_" + std::to_string(::getpid()));
  fs::create_directories(root / "scheduler");
  std::ofstream(root / "scheduler" / "scheduler_config.json") << kWan;
  auto nested = SchedulerConfig::load(root.string());
  ASSERT_TRUE(nested) << nested.status().to_string();
  EXPECT_EQ(nested->scheduler_class, SchedulerClass::unipc);
  auto direct = SchedulerConfig::load((root / "scheduler").string());
  ASSERT_TRUE(direct) << direct.status().to_string();
  auto absent = SchedulerConfig::load((root / "nothing").string());
  EXPECT_FALSE(absent);
  fs::remove_all(root);
}

}  // namespace
}  // namespace prism::configs

// engines/denoise/guidance and flow_schedule: the rules the reference parity does not pin
// alone. When the unconditional pass runs (interval bounds as int(fraction x N), Z-Image's
// truncation), each guidance building block on hand-checkable tensors, parameter validation,
// and the schedule's errors and Z-Image / Wan specifics.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "configs/scheduler_config.h"
#include "engines/denoise/flow_schedule.h"
#include "engines/denoise/guidance.h"
#include "engines/denoise/samplers.h"

namespace prism::engines::denoise {
namespace {

Tensor vec(std::initializer_list<float> v) { return Tensor::from<float>(v, {int64_t(v.size())}); }

TEST(DenoiseGuidance, IntervalCountsSteps) {
  GuidanceParams g;
  g.guidance_scale = 4.0;
  struct Case {
    double start, stop;
    int num_steps, expected_on, first_on;
  };
  const Case cases[] = {{0.0, 1.0, 50, 50, 0}, {0.0, 0.6, 50, 30, 0}, {0.1, 0.6, 20, 10, 2},
                        {0.25, 1.0, 9, 7, 2},  {0.0, 0.0, 10, 0, -1}, {0.5, 0.5, 10, 0, -1}};
  for (const Case& c : cases) {
    g.interval_start = c.start, g.interval_stop = c.stop;
    int on = 0, first = -1;
    for (int i = 0; i < c.num_steps; ++i)
      if (cfg_active(g, true, i, c.num_steps, 0.5)) {
        if (first < 0) first = i;
        ++on;
      }
    EXPECT_EQ(on, c.expected_on) << c.start << " " << c.stop << " " << c.num_steps;
    EXPECT_EQ(first, c.first_on) << c.start << " " << c.stop;
  }
  EXPECT_FALSE(cfg_active(g, false, 0, 10, 0.5));  // no uncond conditioning
  g.guidance_scale = 1.0;
  EXPECT_FALSE(cfg_active(g, true, 0, 10, 0.5));
}

TEST(DenoiseGuidance, ZImageTruncationTurnsGuidanceOffLate) {
  GuidanceParams g;
  g.guidance_scale = 5.0;
  g.cfg_truncation = 0.7;
  EXPECT_TRUE(cfg_active(g, true, 3, 10, 0.31));   // t_norm 0.69
  EXPECT_FALSE(cfg_active(g, true, 4, 10, 0.29));  // t_norm 0.71
  g.cfg_truncation = 1.5;  // > 1: the pipeline ignores it
  EXPECT_TRUE(cfg_active(g, true, 9, 10, 0.01));
}

TEST(DenoiseGuidance, BuildingBlocks) {
  const Tensor cond = vec({1, 2, 3, 4}), uncond = vec({0, 1, 1, 0});
  const Tensor cfg = cfg_combine(cond, uncond, 3.0);
  const float want[] = {3, 4, 7, 12};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(cfg.data<float>()[i], want[i]);
  // <c, u> / (||u||^2 + 1e-8) = 5 / (2 + 1e-8).
  EXPECT_NEAR(cfg_zero_star_scale(cond, uncond), 5 / (2 + 1e-8), 1e-12);
  // The norm cap: ||(3,4,7,12)|| = sqrt(218) > 1.1 ||cond|| = 1.1 sqrt(30).
  Tensor capped = cfg.clone();
  cap_norm(capped, cond, 1.1);
  double n2 = 0;
  for (int i = 0; i < 4; ++i) n2 += double(capped.data<float>()[i]) * capped.data<float>()[i];
  EXPECT_NEAR(std::sqrt(n2), 1.1 * std::sqrt(30.0), 1e-5);
  Tensor loose = cfg.clone();
  cap_norm(loose, cond, 10.0);  // under the cap: unchanged
  for (int i = 0; i < 4; ++i) EXPECT_EQ(loose.data<float>()[i], cfg.data<float>()[i]);
  // rescale with phi 1 gives cond's (unbiased) std; phi 0 changes nothing.
  Tensor full = cfg.clone();
  rescale_noise_cfg(full, cond, 1.0);
  const double mean = (3 + 4 + 7 + 12) / 4.0;
  double ss = 0;
  for (float v : want) ss += (v - mean) * (v - mean);
  const double ratio = std::sqrt(5.0 / 3.0) / std::sqrt(ss / 3);  // std(1,2,3,4) = sqrt(5/3)
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(full.data<float>()[i], want[i] * ratio, 1e-5);
  Tensor none = cfg.clone();
  rescale_noise_cfg(none, cond, 0.0);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(none.data<float>()[i], want[i]);
}

TEST(DenoiseGuidance, Validation) {
  GuidanceParams g;
  EXPECT_TRUE(g.validate().ok());
  g.interval_start = 0.7, g.interval_stop = 0.6;
  EXPECT_FALSE(g.validate().ok());
  g = {};
  g.guidance_rescale = 1.2;
  EXPECT_FALSE(g.validate().ok());
  g = {};
  g.zero_init_steps = -1;
  EXPECT_FALSE(g.validate().ok());
  g = {};
  g.cfg_normalization = -0.5;
  EXPECT_FALSE(g.validate().ok());
}

configs::SchedulerConfig z_image_config() {
  configs::SchedulerConfig c;
  c.shift = 3.0;
  return c;
}

TEST(DenoiseFlowSchedule, ZImageTurboEightSteps) {
  ScheduleRequest r;
  r.num_steps = 8;
  r.mu = calculate_shift(z_image_seq_len(128, 128), z_image_config());  // 1024 px: 4096 tokens
  EXPECT_NEAR(*r.mu, 1.15, 1e-12);  // computed, unused: Z-Image shifts statically
  r.sigmas = z_image_default_sigmas(8);
  Result<FlowSchedule> s = make_flow_schedule(z_image_config(), r);
  ASSERT_TRUE(s) << s.status().to_string();
  ASSERT_EQ(s->sigmas.size(), 9u);
  EXPECT_DOUBLE_EQ(s->sigmas[0], 1.0);
  EXPECT_NEAR(s->sigmas[7], 3 * 0.125 / (1 + 2 * 0.125), 1e-15);
  EXPECT_EQ(s->sigmas[8], 0.0);
  EXPECT_NEAR(s->timesteps[1], 1000 * 3 * 0.875 / (1 + 2 * 0.875), 1e-9);
}

TEST(DenoiseFlowSchedule, Errors) {
  configs::SchedulerConfig dynamic = z_image_config();
  dynamic.use_dynamic_shifting = true;
  ScheduleRequest r;
  r.num_steps = 4;
  EXPECT_EQ(make_flow_schedule(dynamic, r).status().code(), StatusCode::invalid_argument);  // no mu
  r.mu = 1.0;
  EXPECT_TRUE(make_flow_schedule(dynamic, r).has_value());
  r.sigmas = {1.0, 0.5, 0.0, 0.0};  // dynamic shifting divides by sigma
  EXPECT_EQ(make_flow_schedule(dynamic, r).status().code(), StatusCode::invalid_argument);
  r.sigmas = {1.0, 0.5};  // two for four steps
  EXPECT_EQ(make_flow_schedule(dynamic, r).status().code(), StatusCode::invalid_argument);
  r.sigmas = {};
  r.num_steps = 0;
  EXPECT_EQ(make_flow_schedule(dynamic, r).status().code(), StatusCode::invalid_argument);
}

TEST(DenoiseFlowSchedule, WanUniPcFirstSigmaIsNudgedBelowOne) {
  configs::SchedulerConfig c;
  c.scheduler_class = configs::SchedulerClass::unipc;
  c.shift = 3.0;
  ScheduleRequest r;
  r.num_steps = 4;
  Result<FlowSchedule> s = make_flow_schedule(c, r);
  ASSERT_TRUE(s) << s.status().to_string();
  EXPECT_DOUBLE_EQ(s->sigmas[0], 1.0 - 1e-6);
  EXPECT_EQ(s->timesteps[0], 999.0);
  EXPECT_EQ(s->sigmas.back(), 0.0);
  const SamplerOptions o = sampler_options(c);
  EXPECT_EQ(o.kind, SamplerKind::unipc);
  EXPECT_EQ(o.solver_order, 2);
  EXPECT_EQ(sampler_options(z_image_config()).kind, SamplerKind::flow_euler);
}

}  // namespace
}  // namespace prism::engines::denoise

// engines/denoise/denoise_loop on fake denoisers (no kernels, tier-independent): model-pass
// counts under a CFG interval, the guided velocity actually used, seeds and injected noise,
// cancellation and deadlines between steps, progress events, and requests at different steps
// (and their unconditional rows) packed into one Denoiser::predict.
#include "engines/denoise/denoise_loop.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "engines/denoise/noise.h"

namespace prism::engines::denoise {
namespace {

// v = k everywhere, k = the row's conditioning[0, 0]: a constant velocity field, so Euler's
// final latent is x_init - sum_i (sigma_i - sigma_{i+1}) v_i in closed form. Records batches.
class ConstantFieldDenoiser : public models::Denoiser {
 public:
  struct State : models::DenoiseState {
    models::DenoiseBatch batch;
  };
  std::unique_ptr<models::DenoiseState> begin(const models::DenoiseBatch& batch) const override {
    batches.push_back(batch);
    auto s = std::make_unique<State>();
    s->batch = batch;
    return s;
  }
  void run_blocks(models::DenoiseState&, int, int) const override {}
  std::vector<Tensor> end(models::DenoiseState& state) const override {
    const models::DenoiseBatch& b = static_cast<State&>(state).batch;
    std::vector<Tensor> out;
    for (size_t i = 0; i < b.latents.size(); ++i) {
      Tensor v = Tensor::empty(b.latents[i].shape(), DType::f32);
      for (int64_t e = 0; e < v.numel(); ++e) v.data<float>()[e] = b.conditioning[i].data<float>()[0];
      out.push_back(v);
    }
    return out;
  }
  int num_blocks() const override { return 2; }
  int64_t hidden_size() const override { return 8; }
  int64_t latent_channels() const override { return 4; }
  int64_t size_multiple() const override { return 16; }
  double flops(int64_t, int64_t) const override { return 0; }

  mutable std::vector<models::DenoiseBatch> batches;
};

Tensor constant_cond(float k, int64_t tokens = 3) {
  Tensor t = Tensor::zeros({tokens, 2}, DType::f32);
  t.data<float>()[0] = k;
  return t;
}

FlowSchedule linear_schedule(int n) {
  FlowSchedule s;
  for (int i = 0; i < n; ++i) {
    s.sigmas.push_back(1.0 - double(i) / n);
    s.timesteps.push_back(1000.0 * s.sigmas.back());
  }
  s.sigmas.push_back(0.0);
  return s;
}

DenoiseRequest make_request(int64_t id, int num_steps, float cond, std::optional<float> uncond = std::nullopt,
                            double w = 1.0) {
  DenoiseRequest r;
  r.id = id;
  r.latent_shape = {4, 2, 3};
  r.seed = uint64_t(id) * 1000 + 7;
  r.cond = constant_cond(cond);
  if (uncond) r.uncond = constant_cond(*uncond, 2);
  r.schedule = linear_schedule(num_steps);
  r.guidance.guidance_scale = w;
  return r;
}

std::vector<DenoiseResult> run_to_end(DenoiseLoop& loop, const models::Denoiser& model, int64_t now_ms = 0) {
  std::vector<DenoiseResult> all;
  for (int i = 0; i < 10000 && loop.num_running() > 0; ++i)
    for (DenoiseResult& r : loop.step(model, now_ms)) all.push_back(std::move(r));
  return all;
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape())) return false;
  for (int64_t e = 0; e < a.numel(); ++e)
    if (a.data<float>()[e] != b.data<float>()[e]) return false;
  return true;
}

TEST(DenoiseLoop, CfgIntervalStopAt60PercentOf50StepsIs80ModelPasses) {
  ConstantFieldDenoiser model;
  DenoiseLoop loop;
  DenoiseRequest r = make_request(1, 50, 0.5f, -0.25f, 4.0);
  r.guidance.interval_start = 0.0;
  r.guidance.interval_stop = 0.6;
  const Tensor x_init = gaussian_noise(r.latent_shape, r.seed);
  ASSERT_TRUE(loop.add(r).ok());
  const std::vector<DenoiseResult> done = run_to_end(loop, model);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].status.ok()) << done[0].status.to_string();
  EXPECT_EQ(loop.counters().cond_passes, 50);
  EXPECT_EQ(loop.counters().uncond_passes, 30);
  EXPECT_EQ(loop.counters().cond_passes + loop.counters().uncond_passes, 80);
  EXPECT_EQ(loop.counters().steps, 50);
  EXPECT_EQ(loop.counters().model_calls, 50);
  // The velocity used: guided (-0.25 + 4 (0.5 + 0.25) = 2.75) on the first 30 steps of 1/50
  // each, the conditional 0.5 on the last 20: x_final = x_init - (30 * 2.75 + 20 * 0.5) / 50.
  const double shift = (30 * 2.75 + 20 * 0.5) / 50;
  for (int64_t e = 0; e < x_init.numel(); ++e)
    EXPECT_NEAR(done[0].latent.data<float>()[e], x_init.data<float>()[e] - shift, 1e-5) << e;
}

TEST(DenoiseLoop, UnguidedRequestsRunNoUnconditionalPass) {
  ConstantFieldDenoiser model;
  DenoiseLoop loop;
  ASSERT_TRUE(loop.add(make_request(1, 10, 0.5f)).ok());                  // no uncond
  ASSERT_TRUE(loop.add(make_request(2, 10, 0.5f, -0.5f, 1.0)).ok());      // w = 1
  run_to_end(loop, model);
  EXPECT_EQ(loop.counters().cond_passes, 20);
  EXPECT_EQ(loop.counters().uncond_passes, 0);
}

TEST(DenoiseLoop, CfgZeroStarZeroInitStepsSkipTheModel) {
  ConstantFieldDenoiser model;
  DenoiseLoop loop;
  DenoiseRequest r = make_request(1, 8, 0.5f, 0.25f, 3.0);
  r.guidance.cfg_zero_star = true;
  r.guidance.zero_init_steps = 2;
  int events = 0;
  loop.set_progress_callback([&](const DenoiseProgress&) { ++events; });
  ASSERT_TRUE(loop.add(r).ok());
  run_to_end(loop, model);
  EXPECT_EQ(events, 8);
  EXPECT_EQ(loop.counters().steps, 8);
  EXPECT_EQ(loop.counters().cond_passes, 6);
  EXPECT_EQ(loop.counters().uncond_passes, 6);
  EXPECT_EQ(loop.counters().model_calls, 6);
}

TEST(DenoiseLoop, SeedsAreReproducibleAndInjectedNoiseIsUsed) {
  ConstantFieldDenoiser model;
  auto final_latent = [&](const DenoiseRequest& r) {
    DenoiseLoop loop;
    EXPECT_TRUE(loop.add(r).ok());
    std::vector<DenoiseResult> done = run_to_end(loop, model);
    EXPECT_EQ(done.size(), 1u);
    return done.empty() ? Tensor() : done[0].latent;
  };
  // Velocity 0: the final latent is the initial one.
  DenoiseRequest r = make_request(1, 5, 0.0f);
  r.seed = 42;
  const Tensor a = final_latent(r);
  EXPECT_TRUE(same_values(a, final_latent(r)));
  EXPECT_TRUE(same_values(a, gaussian_noise(r.latent_shape, 42)));
  r.seed = 43;
  EXPECT_FALSE(same_values(a, final_latent(r)));
  r.initial_noise = Tensor::zeros(r.latent_shape, DType::f32);
  for (int64_t e = 0; e < r.initial_noise.numel(); ++e) r.initial_noise.data<float>()[e] = float(e) * 0.25f;
  EXPECT_TRUE(same_values(final_latent(r), r.initial_noise));
}

TEST(DenoiseLoop, ProgressEventsEveryStepWithThePredictedCleanLatent) {
  ConstantFieldDenoiser model;
  DenoiseLoop loop;
  DenoiseRequest r = make_request(1, 6, 0.75f);
  ASSERT_TRUE(loop.add(r).ok());
  const Tensor x_init = gaussian_noise(r.latent_shape, r.seed);
  std::vector<int> steps;
  std::vector<float> first_latent, first_x0;
  loop.set_progress_callback([&](const DenoiseProgress& p) {
    EXPECT_EQ(p.id, 1);
    EXPECT_EQ(p.num_steps, 6);
    steps.push_back(p.step);
    first_latent.push_back(p.latent->data<float>()[0]);
    first_x0.push_back(p.x0->data<float>()[0]);
  });
  run_to_end(loop, model);
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  // x at step i is x_init - 0.75 i / 6; x0 = x - sigma_i v = x_init - 0.75 (constant field).
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(first_latent[size_t(i)], x_init.data<float>()[0] - 0.75 * (i + 1) / 6, 1e-6) << i;
    EXPECT_NEAR(first_x0[size_t(i)], x_init.data<float>()[0] - 0.75, 1e-6) << i;
  }
}

TEST(DenoiseLoop, RequestsAtDifferentStepsShareOnePredictCondRowsFirst) {
  ConstantFieldDenoiser model;
  DenoiseLoop loop;
  ASSERT_TRUE(loop.add(make_request(1, 10, 0.5f, 0.1f, 2.0)).ok());
  loop.step(model, 0);
  loop.step(model, 0);
  ASSERT_TRUE(loop.add(make_request(2, 10, 0.25f)).ok());
  loop.step(model, 0);
  ASSERT_EQ(model.batches.size(), 3u);
  const models::DenoiseBatch& b = model.batches.back();
  // Rows: request 1 cond, request 2 cond, request 1 uncond; request 1 at step 2, request 2 at step 0.
  ASSERT_EQ(b.latents.size(), 3u);
  EXPECT_FLOAT_EQ(b.sigmas[0], 0.8f);
  EXPECT_FLOAT_EQ(b.sigmas[1], 1.0f);
  EXPECT_FLOAT_EQ(b.sigmas[2], 0.8f);
  EXPECT_FLOAT_EQ(b.conditioning[0].data<float>()[0], 0.5f);
  EXPECT_FLOAT_EQ(b.conditioning[1].data<float>()[0], 0.25f);
  EXPECT_FLOAT_EQ(b.conditioning[2].data<float>()[0], 0.1f);
  EXPECT_EQ(b.conditioning[2].size(0), 2);  // the uncond conditioning, its own length
  EXPECT_EQ(b.latents[0].data<float>(), b.latents[2].data<float>());  // one latent, two rows
  EXPECT_EQ(loop.counters().model_calls, 3);
}

TEST(DenoiseLoop, DifferentShapesTakeTurns) {
  ConstantFieldDenoiser model;
  DenoiseLoop loop;
  DenoiseRequest wide = make_request(2, 4, 0.5f);
  wide.latent_shape = {4, 3, 2};
  ASSERT_TRUE(loop.add(make_request(1, 4, 0.5f)).ok());
  ASSERT_TRUE(loop.add(wide).ok());
  std::vector<DenoiseResult> done = run_to_end(loop, model);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].id, 1);  // the oldest fixes each pass's shape until it finishes
  EXPECT_EQ(model.batches.size(), 8u);
  for (const models::DenoiseBatch& b : model.batches) EXPECT_EQ(b.latents.size(), 1u);
}

TEST(DenoiseLoop, CancellationAndDeadlinesActBetweenSteps) {
  ConstantFieldDenoiser model;
  DenoiseLoop loop;
  DenoiseRequest timed = make_request(3, 10, 0.5f);
  timed.deadline_ms = 100;
  ASSERT_TRUE(loop.add(make_request(1, 10, 0.5f)).ok());
  ASSERT_TRUE(loop.add(make_request(2, 10, 0.5f)).ok());
  ASSERT_TRUE(loop.add(timed).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(loop.step(model, 50).empty());
  loop.cancel(2);
  loop.cancel(99);  // unknown: ignored
  std::vector<DenoiseResult> out = loop.step(model, 100);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 2);
  EXPECT_EQ(out[0].status.code(), StatusCode::cancelled);
  EXPECT_EQ(out[0].steps_done, 3);
  EXPECT_EQ(out[1].id, 3);
  EXPECT_EQ(out[1].status.code(), StatusCode::deadline_exceeded);
  EXPECT_EQ(out[1].steps_done, 3);
  EXPECT_EQ(model.batches.back().latents.size(), 1u);  // only request 1 stepped
  EXPECT_EQ(loop.num_running(), 1u);
  std::vector<DenoiseResult> rest = run_to_end(loop, model, 100);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_TRUE(rest[0].status.ok());
  EXPECT_EQ(rest[0].steps_done, 10);
  EXPECT_EQ(loop.counters().steps, 3 * 3 + 10 - 3);
}

TEST(DenoiseLoop, RejectsInconsistentRequests) {
  DenoiseLoop loop;
  ASSERT_TRUE(loop.add(make_request(1, 4, 0.5f)).ok());
  EXPECT_EQ(loop.add(make_request(1, 4, 0.5f)).code(), StatusCode::invalid_argument);  // duplicate id
  DenoiseRequest r = make_request(2, 4, 0.5f);
  r.latent_shape = {4, 5};
  EXPECT_EQ(loop.add(r).code(), StatusCode::invalid_argument);
  r = make_request(2, 4, 0.5f, std::nullopt, 3.0);  // guidance without an uncond
  EXPECT_EQ(loop.add(r).code(), StatusCode::invalid_argument);
  r = make_request(2, 4, 0.5f, 0.1f, 3.0);
  r.guidance.interval_stop = 1.5;
  EXPECT_EQ(loop.add(r).code(), StatusCode::invalid_argument);
  r = make_request(2, 4, 0.5f);
  r.initial_noise = Tensor::zeros({4, 2, 2}, DType::f32);
  EXPECT_EQ(loop.add(r).code(), StatusCode::invalid_argument);
  r = make_request(2, 4, 0.5f);
  r.schedule.sigmas.pop_back();
  EXPECT_EQ(loop.add(r).code(), StatusCode::invalid_argument);
  r = make_request(2, 4, 0.5f, 0.1f, 3.0);
  r.uncond = Tensor::zeros({2, 5}, DType::f32);  // another cond_dim
  EXPECT_EQ(loop.add(r).code(), StatusCode::invalid_argument);
  EXPECT_EQ(loop.num_running(), 1u);
}

// Records, per call, which model ran which part of a pass: the precision hook's effect.
class RecordingDenoiser final : public ConstantFieldDenoiser {
 public:
  RecordingDenoiser(std::string name, std::vector<std::string>* log) : name_(std::move(name)), log_(log) {}
  std::unique_ptr<models::DenoiseState> begin(const models::DenoiseBatch& batch) const override {
    log_->push_back(name_ + ":begin");
    return ConstantFieldDenoiser::begin(batch);
  }
  void run_blocks(models::DenoiseState&, int first, int last) const override {
    log_->push_back(name_ + ":" + std::to_string(first) + "-" + std::to_string(last));
  }
  std::vector<Tensor> end(models::DenoiseState& state) const override {
    log_->push_back(name_ + ":end");
    return ConstantFieldDenoiser::end(state);
  }
  int num_blocks() const override { return 4; }

 private:
  std::string name_;
  std::vector<std::string>* log_;
};

TEST(DenoiseLoop, ThePrecisionScheduleSplitsAPassByBlockRanges) {
  std::vector<std::string> log;
  const RecordingDenoiser f32("f32", &log), bf16("bf16", &log);
  DenoiseLoop loop;
  // bf16 for the first two steps everywhere, then for blocks 1-2 only.
  PrecisionSchedule schedule;
  schedule.rules = {{.first_step = 0, .last_step = 2, .precision = ops::Precision::bf16},
                    {.first_block = 1, .last_block = 3, .precision = ops::Precision::bf16}};
  loop.set_precision_schedule(schedule, {{ops::Precision::bf16, &bf16}});
  ASSERT_TRUE(loop.add(make_request(1, 3, 0.5f)).ok());
  const std::vector<DenoiseResult> results = run_to_end(loop, f32);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(log, (std::vector<std::string>{"bf16:begin", "bf16:0-4", "bf16:end",                 // step 0
                                           "bf16:begin", "bf16:0-4", "bf16:end",                 // step 1
                                           "f32:begin", "f32:0-1", "bf16:1-3", "f32:3-4", "f32:end"}));  // step 2

  // The same request without a schedule: one model, whole passes, the same latent (the fakes agree).
  std::vector<std::string> plain_log;
  const RecordingDenoiser plain("f32", &plain_log);
  DenoiseLoop uniform;
  ASSERT_TRUE(uniform.add(make_request(1, 3, 0.5f)).ok());
  const std::vector<DenoiseResult> same = run_to_end(uniform, plain);
  EXPECT_EQ(plain_log.size(), 9u);  // begin, 0-4, end per step
  ASSERT_EQ(same.size(), 1u);
  for (int64_t i = 0; i < same[0].latent.numel(); ++i)
    EXPECT_EQ(same[0].latent.data<float>()[i], results[0].latent.data<float>()[i]);
}

}  // namespace
}  // namespace prism::engines::denoise

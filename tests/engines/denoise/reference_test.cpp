// engines/denoise against tests/reference/denoise_samplers.py (float64 re-statements of
// diffusers' formulas). Schedules: every case's sigmas, timesteps and mu from its real
// scheduler_config.json keys. Trajectories: the step loop on a fake denoiser whose velocity is
// v = a x + b sigma y + c (a, b, c, y carried in the conditioning, so the model is the
// reference's fake), with Euler or UniPC and each guidance variant; every step's latent and
// predicted x0 within 1e-6 relative of the reference, and the model-pass counts equal.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "configs/hf_config.h"
#include "configs/scheduler_config.h"
#include "engines/denoise/denoise_loop.h"
#include "engines/denoise/flow_schedule.h"
#include "test_util/reference_io.h"

namespace prism::engines::denoise {
namespace {

using nlohmann::json;

constexpr double kBound = 1e-6;

const json& reference() {
  static const json ref = [] {
    Result<std::string> dir = test::generate_reference("denoise_samplers.py", "denoise_samplers");
    if (!dir) return json();
    Result<std::string> text = read_file(*dir + "/reference.json");
    return text ? json::parse(*text) : json();
  }();
  return ref;
}

// max |got - ref| / max |ref|, as test_util's compare (1 scale per vector).
double rel_error(const std::vector<double>& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    err = std::max(err, std::fabs(got[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return scale > 0 ? err / scale : err;
}

std::vector<double> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<double>(p, p + t.numel());
}

TEST(DenoiseReference, Generated) {
  ASSERT_FALSE(reference().is_null()) << "denoise_samplers.py failed (see the log above)";
}

TEST(DenoiseReference, SchedulesMatchDiffusersFormulas) {
  if (reference().is_null()) GTEST_SKIP() << "no reference";
  for (const json& c : reference()["schedules"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Result<configs::HfConfig> hf = configs::HfConfig::parse(c["config"].dump(), "scheduler_config.json");
    ASSERT_TRUE(hf) << hf.status().to_string();
    Result<configs::SchedulerConfig> config = configs::SchedulerConfig::from_hf(*hf);
    ASSERT_TRUE(config) << config.status().to_string();
    ScheduleRequest request;
    request.num_steps = c["num_steps"].get<int>();
    if (!c["image_seq_len"].is_null()) {
      request.mu = calculate_shift(c["image_seq_len"].get<int64_t>(), *config);
      EXPECT_NEAR(*request.mu, c["mu"].get<double>(), 1e-12);
    }
    if (c["z_image_sigmas"].get<bool>()) request.sigmas = z_image_default_sigmas(request.num_steps);
    Result<FlowSchedule> s = make_flow_schedule(*config, request);
    ASSERT_TRUE(s) << s.status().to_string();
    const auto sigmas = c["sigmas"].get<std::vector<double>>();
    const auto timesteps = c["timesteps"].get<std::vector<double>>();
    const double e_sigmas = rel_error(s->sigmas, sigmas), e_timesteps = rel_error(s->timesteps, timesteps);
    EXPECT_LE(e_sigmas, kBound);
    EXPECT_LE(e_timesteps, kBound);
    std::printf("[ schedule   ] %-28s %2d steps, rel error sigmas %.1e timesteps %.1e\n",
                c["name"].get<std::string>().c_str(), request.num_steps, e_sigmas, e_timesteps);
    ASSERT_EQ(s->sigmas.size(), sigmas.size());
    EXPECT_EQ(s->sigmas.back(), sigmas.back());  // the terminal, exactly
  }
}

// The reference's fake velocity. conditioning: [1, 3 + numel] = (a, b, c, y...).
class LinearFieldDenoiser : public models::Denoiser {
 public:
  struct State : models::DenoiseState {
    models::DenoiseBatch batch;
  };
  std::unique_ptr<models::DenoiseState> begin(const models::DenoiseBatch& batch) const override {
    auto s = std::make_unique<State>();
    s->batch = batch;
    return s;
  }
  void run_blocks(models::DenoiseState&, int, int) const override {}
  std::vector<Tensor> end(models::DenoiseState& state) const override {
    const models::DenoiseBatch& b = static_cast<State&>(state).batch;
    std::vector<Tensor> out;
    for (size_t i = 0; i < b.latents.size(); ++i) {
      const float* x = b.latents[i].data<float>();
      const float* k = b.conditioning[i].data<float>();
      Tensor v = Tensor::empty(b.latents[i].shape(), DType::f32);
      for (int64_t e = 0; e < v.numel(); ++e)
        v.data<float>()[e] = float(double(k[0]) * x[e] + double(k[1]) * b.sigmas[i] * double(k[3 + e]) + k[2]);
      out.push_back(v);
    }
    return out;
  }
  int num_blocks() const override { return 1; }
  int64_t hidden_size() const override { return 1; }
  int64_t latent_channels() const override { return 4; }
  int64_t size_multiple() const override { return 16; }
  double flops(int64_t, int64_t) const override { return 0; }
};

Tensor conditioning(const json& coef, const std::vector<double>& y) {
  std::vector<float> v;
  for (const json& k : coef) v.push_back(float(k.get<double>()));
  for (double e : y) v.push_back(float(e));
  return Tensor::from<float>(std::span<const float>(v), {1, int64_t(v.size())});
}

DenoiseRequest request_of(const json& t) {
  DenoiseRequest r;
  r.id = 1;
  const auto shape = t["shape"].get<std::vector<int64_t>>();
  r.latent_shape = Dims(std::span<const int64_t>(shape));
  std::vector<float> x;
  for (const json& e : t["x_init"]) x.push_back(float(e.get<double>()));
  r.initial_noise = Tensor::from<float>(std::span<const float>(x), r.latent_shape);
  const auto y = t["y"].get<std::vector<double>>();
  const json& g = t["guidance"];
  r.cond = conditioning(t["cond"], y);
  if (g["has_uncond"].get<bool>()) r.uncond = conditioning(t["uncond"], y);
  r.schedule.sigmas = t["sigmas"].get<std::vector<double>>();
  for (size_t i = 0; i + 1 < r.schedule.sigmas.size(); ++i) r.schedule.timesteps.push_back(r.schedule.sigmas[i] * 1000);
  if (t["sampler"] == "unipc") {
    const json& u = t["unipc"];
    r.sampler.kind = SamplerKind::unipc;
    r.sampler.solver_order = u.value("order", 2);
    r.sampler.bh2 = u.value("solver_type", std::string("bh2")) == "bh2";
    r.sampler.lower_order_final = u.value("lower_order_final", true);
    r.sampler.disable_corrector = u.value("disable_corrector", std::vector<int64_t>{});
  }
  r.guidance.guidance_scale = g["guidance_scale"].get<double>();
  r.guidance.interval_start = g["interval_start"].get<double>();
  r.guidance.interval_stop = g["interval_stop"].get<double>();
  if (g.contains("cfg_truncation")) r.guidance.cfg_truncation = g["cfg_truncation"].get<double>();
  r.guidance.cfg_normalization = g.value("cfg_normalization", 0.0);
  r.guidance.cfg_zero_star = g.value("cfg_zero_star", false);
  r.guidance.zero_init_steps = g.value("zero_init_steps", 0);
  r.guidance.guidance_rescale = g.value("guidance_rescale", 0.0);
  return r;
}

TEST(DenoiseReference, TrajectoriesMatchDiffusersFormulas) {
  if (reference().is_null()) GTEST_SKIP() << "no reference";
  const LinearFieldDenoiser model;
  for (const json& t : reference()["trajectories"]) {
    const std::string name = t["name"].get<std::string>();
    SCOPED_TRACE(name);
    DenoiseLoop loop;
    ASSERT_TRUE(loop.add(request_of(t)).ok());
    std::vector<std::vector<double>> latents, x0s;
    loop.set_progress_callback([&](const DenoiseProgress& p) {
      EXPECT_EQ(p.step, int(latents.size()));
      latents.push_back(values(*p.latent));
      x0s.push_back(values(*p.x0));
    });
    std::vector<DenoiseResult> done;
    for (int i = 0; i < 1000 && done.empty(); ++i) done = loop.step(model, 0);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_TRUE(done[0].status.ok());
    const auto& expected_latents = t["expected_latents"];
    const auto& expected_x0 = t["expected_x0"];
    ASSERT_EQ(latents.size() + 1, expected_latents.size());
    double worst = 0;
    for (size_t i = 0; i < latents.size(); ++i) {
      const double e_latent = rel_error(latents[i], expected_latents[i + 1].get<std::vector<double>>());
      const double e_x0 = rel_error(x0s[i], expected_x0[i].get<std::vector<double>>());
      EXPECT_LE(e_latent, kBound) << "latent after step " << i;
      EXPECT_LE(e_x0, kBound) << "x0 at step " << i;
      worst = std::max({worst, e_latent, e_x0});
    }
    EXPECT_EQ(rel_error(values(done[0].latent), expected_latents.back().get<std::vector<double>>()),
              rel_error(latents.back(), expected_latents.back().get<std::vector<double>>()));
    EXPECT_EQ(loop.counters().cond_passes, t["expected_passes"]["cond"].get<int64_t>());
    EXPECT_EQ(loop.counters().uncond_passes, t["expected_passes"]["uncond"].get<int64_t>());
    std::printf("[ trajectory ] %-34s %2zu steps, worst rel error %.2e\n", name.c_str(), latents.size(), worst);
  }
}

}  // namespace
}  // namespace prism::engines::denoise

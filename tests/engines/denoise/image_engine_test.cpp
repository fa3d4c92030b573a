// The "image" deployment (engines/denoise/image_engine) over serving, on the demo set's tiny
// random Z-Image pipeline (tools/demo/demo_image.h, written by C++: no Python here; the
// pipeline's numbers are checked against diffusers' by tests/parity/z_image_pipeline_test.cpp,
// here the engine's serving behaviour): requests through
// Deployment::submit get an image of the asked size; n images come from seeds s, s + 1, ... and
// equal single-image requests with those seeds; previews arrive at the planned steps and
// ImageStep partials after every step when asked; cancellation and a deadline stop a request
// between steps; the reply's pass counts and the prism_denoise_* series count the model's rows;
// concurrent requests at one size share model passes.
#include "engines/denoise/image_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "app/engines.h"
#include "frontends/image_frontend.h"
#include "frontends/image_payload.h"
#include "serving/deployment_set.h"
#include "test_util/paths.h"
#include "tools/demo/demo_image.h"

namespace prism::engines::denoise {
namespace {

using frontends::ImageOutput;
using frontends::ImagePreview;
using frontends::ImageStep;
using ::testing::HasSubstr;

constexpr int kWidth = 64, kHeight = 48;  // multiples of 16 (the demo VAE's 8 x the patch 2)

// Written once per test program (each test only reads it).
Result<std::string> tiny_z_image() {
  static const Result<std::string> dir = []() -> Result<std::string> {
    std::string d = test::scratch_dir("image_engine_demo_image");
    PRISM_RETURN_IF_ERROR(tools::demo::write_demo_image(d));
    return d;
  }();
  return dir;
}

// What one request got: its partials in order and its result.
struct Call {
  std::vector<ImagePreview> previews;
  std::vector<ImageStep> steps;
  std::optional<Result<ImageOutput>> result;
};

class ImageDeployment : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = tiny_z_image();
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    serving::DeploymentConfig config;
    config.name = "tiny-image";
    config.task = "image";
    config.model = *dir;
    config.timeout_ms = 0;
    config.knobs.set("default_steps", int64_t{4});
    config.knobs.set("default_guidance_scale", 0.0);
    ASSERT_TRUE(set_.add(config, app::make_engines()).ok());
    set_.start_all();
    ASSERT_TRUE(set_.wait_ready().ok());
    deployment_ = *set_.find("tiny-image");
    frontend_ = std::dynamic_pointer_cast<const frontends::ImageFrontend>(deployment_->frontend());
    ASSERT_NE(frontend_, nullptr);
  }

  frontends::ImageParams params(uint64_t seed) const {
    frontends::ImageParams p = frontend_->defaults();
    p.width = kWidth;
    p.height = kHeight;
    p.seed = seed;
    return p;
  }

  // A request, not yet submitted; `call` gets its partials and result (guarded by mu_).
  serving::RequestPtr request(const frontends::ImageParams& p, Call& call) {
    auto input = std::make_unique<frontends::ImageInput>();
    input->params = p;
    input->prompt_tokens = *frontend_->prompt_tokens("a red fox in the snow");
    input->negative_tokens = *frontend_->prompt_tokens("blurry");
    auto r = serving::make_request(std::move(input), [this, &call](Result<serving::PayloadPtr> result) {
      std::lock_guard lock(mu_);
      if (result.has_value())
        call.result = *dynamic_cast<ImageOutput*>(result->get());
      else
        call.result = result.status();
      cv_.notify_all();
    });
    r->on_partial = [this, &call](serving::PayloadPtr chunk) {
      std::lock_guard lock(mu_);
      if (auto* preview = dynamic_cast<ImagePreview*>(chunk.get())) call.previews.push_back(*preview);
      if (auto* step = dynamic_cast<ImageStep*>(chunk.get())) call.steps.push_back(*step);
    };
    return r;
  }

  void wait(const std::vector<Call*>& calls) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      for (const Call* c : calls)
        if (!c->result) return false;
      return true;
    });
  }

  Call run(const frontends::ImageParams& p) {
    Call call;
    EXPECT_TRUE(deployment_->submit(request(p, call)).ok());
    wait({&call});
    return call;
  }

  double series(const std::string& name) const {
    const std::string text = metrics_.render();
    const size_t at = text.find(name + " ");
    EXPECT_NE(at, std::string::npos) << name << " in\n" << text;
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 1));
  }

  serving::MetricsRegistry metrics_;
  serving::DeploymentSet set_{metrics_};
  serving::Deployment* deployment_ = nullptr;
  std::shared_ptr<const frontends::ImageFrontend> frontend_;
  std::mutex mu_;
  std::condition_variable cv_;
};

constexpr char kLabels[] = "{deployment=\"tiny-image\",modality=\"image_generation\"";

TEST_F(ImageDeployment, AnImageOfTheAskedSizeAndItsPassCounts) {
  frontends::ImageParams p = params(11);
  Call call = run(p);
  ASSERT_TRUE(call.result->has_value()) << call.result->status().to_string();
  const ImageOutput& out = **call.result;
  ASSERT_EQ(out.images.size(), 1u);
  EXPECT_EQ(out.images[0].width, kWidth);
  EXPECT_EQ(out.images[0].height, kHeight);
  EXPECT_EQ(out.images[0].pixels.size(), size_t(kWidth * kHeight * 3));
  EXPECT_EQ(out.steps, 4);
  EXPECT_EQ(out.cond_passes, 4);
  EXPECT_EQ(out.uncond_passes, 0);
  EXPECT_TRUE(call.previews.empty());
  EXPECT_TRUE(call.steps.empty());

  // Guidance 3: an unconditional pass per step; guidance 1 runs none (the pipeline's g > 1).
  p.guidance_scale = 3.0f;
  Call guided = run(p);
  ASSERT_TRUE(guided.result->has_value()) << guided.result->status().to_string();
  EXPECT_EQ((*guided.result)->cond_passes, 4);
  EXPECT_EQ((*guided.result)->uncond_passes, 4);
  EXPECT_NE((*guided.result)->images[0].pixels, out.images[0].pixels);
  p.guidance_scale = 1.0f;
  Call unit = run(p);
  ASSERT_TRUE(unit.result->has_value()) << unit.result->status().to_string();
  EXPECT_EQ((*unit.result)->uncond_passes, 0);
  EXPECT_EQ((*unit.result)->images[0].pixels, out.images[0].pixels);

  const std::string l = kLabels;
  EXPECT_EQ(series("prism_denoise_steps_total" + l + "}"), 12);
  EXPECT_EQ(series("prism_denoise_model_passes_total" + l + ",pass=\"cond\"}"), 12);
  EXPECT_EQ(series("prism_denoise_model_passes_total" + l + ",pass=\"uncond\"}"), 4);
  EXPECT_EQ(series("prism_image_seconds_count" + l + "}"), 3);
  EXPECT_EQ(series("prism_vae_decode_seconds_count" + l + "}"), 3);
}

TEST_F(ImageDeployment, NImagesAreTheImagesOfSuccessiveSeeds) {
  frontends::ImageParams p = params(100);
  p.n = 2;
  Call both = run(p);
  ASSERT_TRUE(both.result->has_value()) << both.result->status().to_string();
  ASSERT_EQ((*both.result)->images.size(), 2u);
  EXPECT_EQ((*both.result)->cond_passes, 8);
  EXPECT_NE((*both.result)->images[0].pixels, (*both.result)->images[1].pixels);
  for (int i = 0; i < 2; ++i) {
    Call one = run(params(100 + i));
    ASSERT_TRUE(one.result->has_value()) << one.result->status().to_string();
    EXPECT_EQ((*one.result)->images[0].pixels, (*both.result)->images[size_t(i)].pixels) << "seed " << 100 + i;
  }
}

TEST_F(ImageDeployment, PreviewsAtThePlannedStepsAndStepPartials) {
  frontends::ImageParams p = params(5);
  p.n = 2;
  p.partial_images = 2;
  p.report_steps = true;
  Call call = run(p);
  ASSERT_TRUE(call.result->has_value()) << call.result->status().to_string();
  ASSERT_EQ(call.previews.size(), 4u);  // partial_images per image
  for (int image = 0; image < 2; ++image) {
    int k = 0;
    for (const ImagePreview& preview : call.previews) {
      if (preview.image_index != image) continue;
      EXPECT_EQ(preview.partial_index, k);
      EXPECT_EQ(preview.step, preview_step(k, 2, 4));
      EXPECT_EQ(preview.image.width, kWidth);
      EXPECT_EQ(preview.image.height, kHeight);
      ++k;
    }
    EXPECT_EQ(k, 2) << "image " << image;
    std::vector<int> steps;
    for (const ImageStep& s : call.steps)
      if (s.image_index == image) {
        steps.push_back(s.step);
        EXPECT_EQ(s.steps, 4);
      }
    EXPECT_EQ(steps, (std::vector<int>{1, 2, 3, 4})) << "image " << image;
  }
  EXPECT_EQ(preview_step(0, 2, 4), 1);
  EXPECT_EQ(preview_step(1, 2, 4), 2);
}

TEST_F(ImageDeployment, CancellationStopsARequestBetweenSteps) {
  frontends::ImageParams p = params(3);
  p.report_steps = true;
  Call call;
  serving::RequestPtr r = request(p, call);
  std::weak_ptr<serving::Request> weak = r;
  r->on_partial = [this, &call, weak](serving::PayloadPtr chunk) {
    std::lock_guard lock(mu_);
    if (auto* step = dynamic_cast<ImageStep*>(chunk.get())) {
      call.steps.push_back(*step);
      if (step->step == 1)
        if (auto req = weak.lock()) req->cancel();  // the client left after the first step
    }
  };
  ASSERT_TRUE(deployment_->submit(std::move(r)).ok());
  wait({&call});
  ASSERT_FALSE(call.result->has_value());
  EXPECT_EQ(call.result->status().code(), StatusCode::cancelled) << call.result->status().to_string();
  ASSERT_FALSE(call.steps.empty());
  EXPECT_LT(call.steps.back().step, 4);
}

TEST_F(ImageDeployment, ADeadlinePassedBetweenStepsEndsTheRequest) {
  frontends::ImageParams p = params(4);
  p.report_steps = true;
  Call call;
  serving::RequestPtr r = request(p, call);
  const serving::Clock::time_point deadline = serving::Clock::now() + std::chrono::milliseconds(500);
  r->deadline = deadline;
  r->on_partial = [this, &call, deadline](serving::PayloadPtr chunk) {
    if (auto* step = dynamic_cast<ImageStep*>(chunk.get())) {
      {
        std::lock_guard lock(mu_);
        call.steps.push_back(*step);
      }
      // On the engine thread, after the first step: the next one is planned past the deadline
      // (whatever the machine's speed, the request expires before its last step).
      if (step->step == 1) std::this_thread::sleep_until(deadline + std::chrono::milliseconds(10));
    }
  };
  ASSERT_TRUE(deployment_->submit(std::move(r)).ok());
  wait({&call});
  ASSERT_FALSE(call.result->has_value());
  EXPECT_EQ(call.result->status().code(), StatusCode::deadline_exceeded) << call.result->status().to_string();
  EXPECT_LT(call.steps.size(), 4u);
}

TEST_F(ImageDeployment, ConcurrentRequestsShareModelPasses) {
  // The second request is submitted after the first one's first step, so it joins the loop
  // while the first runs: their remaining steps are batched passes of two rows.
  frontends::ImageParams p = params(21);
  p.report_steps = true;
  Call first, second;
  serving::RequestPtr r1 = request(p, first);
  serving::RequestPtr r2 = request(params(22), second);
  r1->on_partial = [this, &first, r2](serving::PayloadPtr chunk) {
    bool submit = false;
    {
      std::lock_guard lock(mu_);
      if (auto* step = dynamic_cast<ImageStep*>(chunk.get())) {
        first.steps.push_back(*step);
        submit = step->step == 1;
      }
    }
    if (submit) {
      EXPECT_TRUE(deployment_->submit(r2).ok());
    }
  };
  ASSERT_TRUE(deployment_->submit(std::move(r1)).ok());
  wait({&first, &second});
  ASSERT_TRUE(first.result->has_value()) << first.result->status().to_string();
  ASSERT_TRUE(second.result->has_value()) << second.result->status().to_string();
  const std::string l = kLabels;
  EXPECT_EQ(series("prism_denoise_steps_total" + l + "}"), 8);
  EXPECT_EQ(series("prism_denoise_model_passes_total" + l + ",pass=\"cond\"}"), 8);
  // One step-seconds observation per batched model call: fewer than the 8 image steps.
  EXPECT_LT(series("prism_denoise_step_seconds_count" + l + "}"), 8);

  // Sharing passes changes nothing in the images: the second equals its request alone.
  Call alone = run(params(22));
  ASSERT_TRUE(alone.result->has_value());
  EXPECT_EQ((*alone.result)->images[0].pixels, (*second.result)->images[0].pixels);
}

}  // namespace
}  // namespace prism::engines::denoise

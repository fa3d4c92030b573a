// The "vad" deployment (engines/vad) on the real Silero file: its probabilities are the
// network's, a request's state carries a stream across requests, pieces of concurrent
// requests share forwards (and the metric shows it), and bad requests or files fail clearly.
#include "engines/vad/vad_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "base/file.h"
#include "frontends/vad_payload.h"
#include "media/audio.h"
#include "models/vad/silero_vad.h"
#include "serving/deployment.h"
#include "test_util/paths.h"
#include "test_util/speech_samples.h"

namespace prism::engines::vad {
namespace {

using ::testing::HasSubstr;

std::string onnx_path() { return test::testdata_dir() + "/vad/silero_vad.onnx"; }

using test::jfk;

serving::DeploymentConfig vad_config(std::string model) {
  serving::DeploymentConfig c;
  c.name = "vad";
  c.task = "vad";
  c.model = std::move(model);
  c.timeout_ms = 0;
  c.batching.max_batch_size = 64;
  c.batching.max_queue_delay_us = 20'000;  // the test's requests arrive together
  return c;
}

class VadDeployment : public ::testing::Test {
 protected:
  void SetUp() override {
    register_vad_engine(engines_);
    deployment_ = std::make_unique<serving::Deployment>(vad_config(onnx_path()), *engines_.find("vad"), metrics_);
    deployment_->start();
    ASSERT_TRUE(deployment_->wait_ready().ok());
  }

  // Sends the inputs at once; the results in input order.
  std::vector<Result<frontends::VadOutput>> call(std::vector<frontends::VadInput> inputs) {
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    std::vector<Result<frontends::VadOutput>> out(inputs.size(), Result<frontends::VadOutput>(internal_error("unset")));
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto r = serving::make_request(std::make_unique<frontends::VadInput>(std::move(inputs[i])),
                                     [&, i](Result<serving::PayloadPtr> result) {
                                       std::lock_guard lock(mu);
                                       if (result.has_value())
                                         out[i] = *dynamic_cast<frontends::VadOutput*>(result->get());
                                       else
                                         out[i] = result.status();
                                       ++done;
                                       cv.notify_all();
                                     });
      EXPECT_TRUE(deployment_->submit(std::move(r)).ok());
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == inputs.size(); });
    return out;
  }

  serving::MetricsRegistry metrics_;
  serving::EngineFactories engines_;
  std::unique_ptr<serving::Deployment> deployment_;
};

TEST_F(VadDeployment, ConcurrentRecordingsShareForwardsAndGetTheNetworksProbabilities) {
  // Two recordings of 30 s and 20 s (several steps each), sent together.
  std::vector<float> a, b;
  while (a.size() < size_t(30 * 16000)) a.insert(a.end(), jfk().begin(), jfk().end());
  for (int i = 0; i < 2; ++i) b.insert(b.end(), jfk().rbegin(), jfk().rend());
  std::vector<frontends::VadInput> inputs(2);
  inputs[0].samples = a;
  inputs[1].samples = b;
  std::vector<Result<frontends::VadOutput>> out = call(std::move(inputs));

  const auto model = models::SileroVad::load(onnx_path());
  ASSERT_TRUE(model.has_value());
  for (const auto& [got, audio] : {std::pair{&out[0], &a}, std::pair{&out[1], &b}}) {
    ASSERT_TRUE(got->has_value()) << got->status().to_string();
    const std::vector<float> want = (*model)->probabilities(*audio);
    ASSERT_EQ((*got)->probabilities.size(), want.size());
    for (size_t w = 0; w < want.size(); ++w) EXPECT_NEAR((*got)->probabilities[w], want[w], 1e-5) << w;
  }
  const std::string text = metrics_.render();
  EXPECT_THAT(text, HasSubstr("prism_vad_windows_total{deployment=\"vad\",modality=\"vad\"} " +
                              std::to_string(out[0]->probabilities.size() + out[1]->probabilities.size())));
  // The first forwards took two streams: fewer forwards with one stream than forwards in all.
  auto value_of = [&](const std::string& series) {
    const size_t at = text.find(series + " ");
    EXPECT_NE(at, std::string::npos) << series;
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 1));
  };
  const double single = value_of("prism_vad_forward_streams_bucket{deployment=\"vad\",modality=\"vad\",le=\"1\"}");
  const double all = value_of("prism_vad_forward_streams_count{deployment=\"vad\",modality=\"vad\"}");
  EXPECT_LT(single, all);
}

TEST_F(VadDeployment, AStreamContinuesAcrossRequestsThroughItsState) {
  // One recording in three pieces (whole windows), each continuing the last one's state.
  const std::vector<float> audio(jfk().begin(), jfk().begin() + 300 * 512);
  frontends::VadStreamState state;
  std::vector<float> got;
  for (auto [from, to] : {std::pair{0, 100}, std::pair{100, 101}, std::pair{101, 300}}) {
    std::vector<frontends::VadInput> in(1);
    in[0].samples.assign(audio.begin() + from * 512, audio.begin() + to * 512);
    in[0].state = state;
    auto out = call(std::move(in));
    ASSERT_TRUE(out[0].has_value()) << out[0].status().to_string();
    got.insert(got.end(), out[0]->probabilities.begin(), out[0]->probabilities.end());
    state = out[0]->state;
  }
  const auto model = models::SileroVad::load(onnx_path());
  const std::vector<float> want = (*model)->probabilities(audio);
  ASSERT_EQ(got.size(), want.size());
  for (size_t w = 0; w < want.size(); ++w) EXPECT_NEAR(got[w], want[w], 1e-5) << w;
}

TEST_F(VadDeployment, AnEmptyRequestIsRefused) {
  std::vector<frontends::VadInput> in(1);
  auto out = call(std::move(in));
  ASSERT_FALSE(out[0].has_value());
  EXPECT_EQ(out[0].status().code(), StatusCode::invalid_argument);
}

TEST(VadDeploymentLoad, ABadFileFailsTheDeploymentNamingIt) {
  serving::MetricsRegistry metrics;
  serving::EngineFactories engines;
  register_vad_engine(engines);
  const std::string missing = test::scratch_dir("vad_engine_bad") + "/missing.onnx";
  serving::Deployment d(vad_config(missing), *engines.find("vad"), metrics);
  d.start();
  const Status s = d.wait_ready();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(missing));
}

}  // namespace
}  // namespace prism::engines::vad

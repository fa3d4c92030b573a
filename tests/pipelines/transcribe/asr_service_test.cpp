// AsrServices over a real DeploymentSet: the service of a transcribe deployment is built on
// first use and shared (frontend with its speech processor, the VAD its knobs name, settings,
// AsrMetrics labelled by deployment and modality, a submit over Deployment::submit, a live
// scheduler), and a transcription through it decodes on the deployment (a tiny random
// Whisper); unknown models, other tasks, deployments not ready and bad knobs are refused with
// the right codes.
#include "pipelines/transcribe/asr_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/file.h"
#include "engines/generate/generate_engine.h"
#include "engines/vad/vad_engine.h"
#include "pipelines/transcribe/voice_activity.h"
#include "media/audio.h"
#include "serving/echo_engine.h"
#include "test_util/paths.h"
#include "test_util/speech_samples.h"
#include "test_util/reference_io.h"
#include "test_util/whisper_tokenizer.h"

namespace prism::pipelines::transcribe {
namespace {

constexpr double kRate = media::kSpeechSampleRate;

Result<std::string> tiny_whisper_dir() {
  PRISM_ASSIGN_OR_RETURN(std::string dir, test::generate_reference("whisper_family.py", "asr_service_tiny_whisper",
                                                                   "write --vocab 51865 --no-reference"));
  PRISM_RETURN_IF_ERROR(test::write_whisper_files(dir).status());
  return dir;
}

serving::DeploymentConfig transcribe_config(const std::string& name, const std::string& dir) {
  serving::DeploymentConfig c;
  c.name = name;
  c.task = "transcribe";
  c.model = dir;
  c.batching.max_batch_size = 6;
  c.knobs.set("kv_cache_bytes", int64_t(8) << 20);
  return c;
}

class AsrServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::string> dir = tiny_whisper_dir();
    ASSERT_TRUE(dir.has_value()) << dir.status().message();
    engines::generate::register_generate_engine(engines_);
    engines::vad::register_vad_engine(engines_);
    serving::register_echo_engine(engines_);

    serving::Config config;
    config.deployments.push_back(transcribe_config("asr", *dir));
    serving::DeploymentConfig silero = transcribe_config("asr-silero", *dir);
    silero.replicas = 2;
    silero.knobs.set("vad_model", test::testdata_dir() + "/vad/silero_vad.onnx");
    silero.knobs.set("asr_chunk_seconds", 20.0);
    silero.knobs.set("live_tick_ms", int64_t(20));
    config.deployments.push_back(silero);
    serving::DeploymentConfig bad = transcribe_config("asr-bad-knob", *dir);
    bad.knobs.set("asr_chunk_seconds", 90.0, "asr.toml:12");
    config.deployments.push_back(bad);
    serving::DeploymentConfig echo;
    echo.name = "echo";
    echo.task = "echo";
    config.deployments.push_back(echo);
    ASSERT_TRUE(add_vad_deployments(config).ok());  // asr-silero-vad
    ASSERT_TRUE(set_.add_all(config, engines_).ok());
  }

  serving::MetricsRegistry metrics_;
  serving::EngineFactories engines_;
  serving::DeploymentSet set_{metrics_};
  // NOTE: after set_, so destroyed first: live schedulers stop before the deployments.
  std::unique_ptr<AsrServices> services_ = std::make_unique<AsrServices>(set_);
};

TEST_F(AsrServicesTest, RefusesWhatIsNotAReadySpeechDeployment) {
  Result<std::shared_ptr<AsrService>> s = services_->find("asr");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), StatusCode::unavailable) << s.status().message();

  set_.start_all();
  ASSERT_TRUE(set_.wait_ready().ok());
  s = services_->find("nope");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), StatusCode::not_found);
  s = services_->find("echo");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.status().message(), "model 'echo' is not a speech recognition model");
  s = services_->find("asr-bad-knob");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(s.status().message().find("asr.toml:12: knob 'asr_chunk_seconds'"), std::string::npos)
      << s.status().message();
  // Not cached: the same answer again.
  EXPECT_EQ(services_->find("asr-bad-knob").status().code(), StatusCode::invalid_argument);
}

TEST_F(AsrServicesTest, BuildsEachServiceOnceFromTheDeploymentsKnobs) {
  set_.start_all();
  ASSERT_TRUE(set_.wait_ready().ok());
  Result<std::shared_ptr<AsrService>> a = services_->find("asr");
  ASSERT_TRUE(a.has_value()) << a.status().message();
  const AsrService& s = **a;
  EXPECT_EQ(s.deployment, *set_.find("asr"));
  ASSERT_TRUE(s.context.frontend);
  EXPECT_NE(s.context.frontend->speech(), nullptr);
  ASSERT_TRUE(s.context.vad);
  EXPECT_EQ(s.context.vad->settings().kind, "energy");
  EXPECT_EQ(s.context.settings.chunk_seconds, 30.0);
  EXPECT_EQ(s.context.settings.max_chunks_in_flight, 6);
  ASSERT_TRUE(s.context.metrics);
  ASSERT_TRUE(s.live);
  EXPECT_EQ(s.live->open_streams(), 0);
  Result<std::shared_ptr<AsrService>> again = services_->find("asr");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->get(), a->get());

  Result<std::shared_ptr<AsrService>> silero = services_->find("asr-silero");
  ASSERT_TRUE(silero.has_value()) << silero.status().message();
  EXPECT_EQ((*silero)->context.vad->settings().kind, "silero");
  EXPECT_EQ((*silero)->context.vad->settings().deployment, "asr-silero-vad");
  EXPECT_EQ((*set_.find("asr-silero-vad"))->config().task, "vad");
  EXPECT_EQ((*silero)->context.settings.chunk_seconds, 20.0);
  EXPECT_EQ((*silero)->context.settings.max_chunks_in_flight, 12);  // 6 × 2 replicas
  EXPECT_EQ((*silero)->live->settings().tick_ms, 20);
}

TEST_F(AsrServicesTest, ATranscriptionDecodesOnTheDeploymentAndIsMeasured) {
  set_.start_all();
  ASSERT_TRUE(set_.wait_ready().ok());
  Result<std::shared_ptr<AsrService>> a = services_->find("asr");
  ASSERT_TRUE(a.has_value()) << a.status().message();

  // 2 s of silence, jfk.flac's first 5 s, 2 s of silence.
  std::vector<float> audio(size_t(2 * kRate), 0.0f);
  audio.insert(audio.end(), test::jfk().begin(), test::jfk().begin() + ptrdiff_t(5 * kRate));
  audio.insert(audio.end(), size_t(2 * kRate), 0.0f);
  ASSERT_EQ(audio.size(), size_t(9 * kRate));
  TranscribeOptions o;
  o.language = "en";
  o.fixed_tokens_per_chunk = 6;
  o.temperature_fallback = false;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Transcript>> done;
  TranscriptionEvents e;
  e.on_done = [&](Result<Transcript> t) {
    std::lock_guard lock(mu);
    done = std::move(t);
    cv.notify_all();
  };
  auto t = Transcription::start((*a)->context, audio, o, e);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::minutes(5), [&] { return done.has_value(); }));  // a bound, not a check
  }
  ASSERT_TRUE(done->has_value()) << done->status().message();
  const Transcript& tr = **done;
  ASSERT_GE(tr.stats.chunks, 1);
  EXPECT_EQ(tr.stats.decoded_tokens, int64_t(tr.stats.chunks) * 6);
  EXPECT_NEAR(tr.duration, 9.0, 1e-9);
  EXPECT_EQ(tr.language, "en");

  const std::string text = metrics_.render();
  const std::string labels = "{deployment=\"asr\",modality=\"asr\"}";
  EXPECT_NE(text.find("prism_asr_chunks_total" + labels + " " + std::to_string(tr.stats.chunks)), std::string::npos)
      << text;
  EXPECT_NE(text.find("prism_asr_audio_seconds_total" + labels + " 9"), std::string::npos);
  EXPECT_NE(text.find("prism_asr_real_time_factor_count" + labels + " 1"), std::string::npos);
  EXPECT_NE(text.find("prism_asr_live_streams" + labels + " 0"), std::string::npos);
}

}  // namespace
}  // namespace prism::pipelines::transcribe

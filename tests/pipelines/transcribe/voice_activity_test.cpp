// The deployment's VAD: knobs → VadSettings (every bad value named), the "vad" deployments a
// config's Silero files get (a missing file named as knob vad_model's), and both detectors run
// the two ways transcription uses them — whole recordings, and live streams stepped one
// window at a time in a batch — which must agree with each other. Silero runs in a real "vad"
// deployment of the real file.
#include "pipelines/transcribe/voice_activity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "base/file.h"
#include "engines/vad/vad_engine.h"
#include "media/audio.h"
#include "models/vad/silero_vad.h"
#include "serving/deployment.h"
#include "test_util/paths.h"
#include "test_util/speech_samples.h"

namespace prism::pipelines::transcribe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kRate = 16000;

std::string onnx_path() { return test::testdata_dir() + "/vad/silero_vad.onnx"; }

serving::Knobs knobs(std::vector<std::pair<std::string, serving::KnobValue>> values) {
  serving::Knobs k;
  for (auto& [name, value] : values) k.set(name, value, "prism.toml:7");
  return k;
}

using test::jfk;

// 2 s of silence, jfk, 2 s of silence.
std::vector<float> jfk_in_silence() {
  std::vector<float> x(2 * kRate, 0.0f);
  x.insert(x.end(), jfk().begin(), jfk().end());
  x.insert(x.end(), 2 * kRate, 0.0f);
  return x;
}

// The "vad" deployment of the real Silero file, shared by the tests (add_vad_deployments' config).
serving::MetricsRegistry& silero_metrics() {
  static serving::MetricsRegistry metrics;
  return metrics;
}

serving::Deployment& silero_deployment() {
  serving::MetricsRegistry& metrics = silero_metrics();
  static serving::Deployment* deployment = [&metrics] {
    serving::Config config;
    serving::DeploymentConfig asr;
    asr.name = "asr";
    asr.task = "transcribe";
    asr.model = "/unused";
    asr.knobs.set("vad_model", onnx_path());
    config.deployments.push_back(asr);
    PRISM_CHECK(add_vad_deployments(config).ok());
    serving::EngineFactories engines;
    engines::vad::register_vad_engine(engines);
    auto d = new serving::Deployment(config.deployments.back(), *engines.find("vad"), metrics);
    d->start();
    PRISM_CHECK(d->wait_ready().ok());
    return d;
  }();
  return *deployment;
}

std::shared_ptr<const VoiceActivity> load(const std::string& kind) {
  VadSettings s;
  s.kind = kind;
  VadSubmit submit;
  if (kind == "silero") {
    s.deployment = silero_deployment().name();
    submit = [](serving::RequestPtr r) { return silero_deployment().submit(std::move(r)); };
  }
  Result<std::shared_ptr<const VoiceActivity>> vad = VoiceActivity::connect(s, std::move(submit));
  PRISM_CHECK_MSG(vad.has_value(), vad.status().to_string().c_str());
  return *vad;
}

// ---- knobs ----------------------------------------------------------------------------

TEST(VadSettings, DefaultsAreTheEnergyDetectorWithSilerosRules) {
  Result<VadSettings> s = VadSettings::from_knobs(serving::Knobs());
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_EQ(s->kind, "energy");
  EXPECT_EQ(s->model_path, "");
  EXPECT_EQ(s->params.threshold, 0.5f);
  EXPECT_EQ(s->params.min_speech_ms, 250);
  EXPECT_EQ(s->params.min_silence_ms, 100);
  EXPECT_EQ(s->params.speech_pad_ms, 30);
  EXPECT_THAT(VadSettings::knob_names(), ElementsAre("vad", "vad_model", "vad_deployment", "vad_threshold", "vad_min_speech_ms",
                                                     "vad_min_silence_ms", "vad_speech_pad_ms"));
}

TEST(VadSettings, ReadsEveryKnob) {
  Result<VadSettings> s = VadSettings::from_knobs(knobs({{"vad", std::string("silero")},
                                                         {"vad_model", std::string("/m/silero_vad.onnx")},
                                                         {"vad_threshold", 0.6},
                                                         {"vad_min_speech_ms", int64_t(300)},
                                                         {"vad_min_silence_ms", int64_t(500)},
                                                         {"vad_speech_pad_ms", int64_t(0)}}));
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_EQ(s->kind, "silero");
  EXPECT_EQ(s->model_path, "/m/silero_vad.onnx");
  EXPECT_FLOAT_EQ(s->params.threshold, 0.6f);
  EXPECT_EQ(s->params.min_speech_ms, 300);
  EXPECT_EQ(s->params.min_silence_ms, 500);
  EXPECT_EQ(s->params.speech_pad_ms, 0);
  // A model file alone picks Silero; an integer threshold is read as a number.
  s = VadSettings::from_knobs(knobs({{"vad_model", std::string("/m/v.onnx")}}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->kind, "silero");
  s = VadSettings::from_knobs(knobs({{"vad", std::string("energy")}}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->kind, "energy");
}

TEST(VadSettings, BadValuesNameTheKnobAndWhereItWasSet) {
  const std::vector<std::pair<serving::Knobs, std::string>> cases = {
      {knobs({{"vad", std::string("webrtc")}}), "knob 'vad' must be \"energy\" or \"silero\", got \"webrtc\""},
      {knobs({{"vad", int64_t(1)}}), "knob 'vad'"},
      {knobs({{"vad", std::string("silero")}}), "knob 'vad' is \"silero\", which needs knob 'vad_model'"},
      {knobs({{"vad", std::string("energy")}, {"vad_model", std::string("/m/v.onnx")}}), "knob 'vad_model' is set, but"},
      {knobs({{"vad_threshold", 0.0}}), "knob 'vad_threshold' must be between 0 and 1 (exclusive), got 0"},
      {knobs({{"vad_threshold", 1.0}}), "knob 'vad_threshold' must be between 0 and 1"},
      {knobs({{"vad_threshold", std::string("high")}}), "knob 'vad_threshold'"},
      {knobs({{"vad_min_speech_ms", int64_t(-1)}}), "knob 'vad_min_speech_ms' must be between 0 and 60000"},
      {knobs({{"vad_min_silence_ms", int64_t(60001)}}), "knob 'vad_min_silence_ms' must be between 0 and 60000"},
      {knobs({{"vad_speech_pad_ms", 2.5}}), "knob 'vad_speech_pad_ms'"},
  };
  for (const auto& [k, message] : cases) {
    Result<VadSettings> s = VadSettings::from_knobs(k);
    ASSERT_FALSE(s.has_value()) << message;
    EXPECT_EQ(s.status().code(), StatusCode::invalid_argument) << message;
    EXPECT_THAT(s.status().message(), HasSubstr(message));
    EXPECT_THAT(s.status().message(), HasSubstr("prism.toml:7")) << message;
  }
}

// ---- the "vad" deployments of a config ------------------------------------------------

TEST(AddVadDeployments, OneDeploymentPerSileroFileNamedByItsTranscribeDeployments) {
  serving::Config config;
  auto transcribe = [&](std::string name, std::vector<std::pair<std::string, serving::KnobValue>> values) {
    serving::DeploymentConfig d;
    d.name = std::move(name);
    d.task = "transcribe";
    d.model = "/m/" + d.name;
    d.knobs = knobs(std::move(values));
    config.deployments.push_back(d);
  };
  transcribe("a", {{"vad_model", onnx_path()}});
  transcribe("b", {{"vad", std::string("silero")}, {"vad_model", onnx_path()}, {"vad_threshold", 0.6}});
  transcribe("c", {});  // energy: nothing to add
  transcribe("d", {{"vad_deployment", std::string("my-vad")}});  // the user's own
  ASSERT_TRUE(add_vad_deployments(config).ok());
  ASSERT_EQ(config.deployments.size(), 5u);
  const serving::DeploymentConfig& vad = config.deployments.back();
  EXPECT_EQ(vad.name, "a-vad");
  EXPECT_EQ(vad.task, "vad");
  EXPECT_EQ(vad.model, onnx_path());
  EXPECT_EQ(config.deployments[0].knobs.get_string("vad_deployment", "").value(), "a-vad");
  EXPECT_EQ(config.deployments[1].knobs.get_string("vad_deployment", "").value(), "a-vad");  // the same file
  EXPECT_FALSE(config.deployments[2].knobs.has("vad_deployment"));
  EXPECT_EQ(config.deployments[3].knobs.get_string("vad_deployment", "").value(), "my-vad");
  EXPECT_EQ(VadSettings::from_knobs(config.deployments[0].knobs)->kind, "silero");
}

TEST(VoiceActivity, SileroNeedsItsDeployment) {
  VadSettings s;
  s.kind = "silero";
  EXPECT_EQ(VoiceActivity::connect(s, nullptr).status().code(), StatusCode::failed_precondition);
  s.kind = "other";
  EXPECT_FALSE(VoiceActivity::connect(s, nullptr).has_value());
}

// ---- whole recordings -----------------------------------------------------------------

TEST(VoiceActivity, SileroRecordingsAreTheNetworksProbabilitiesAndSpans) {
  const auto vad = load("silero");
  EXPECT_EQ(vad->settings().kind, "silero");
  const std::vector<float> audio = jfk_in_silence();
  const auto model = models::SileroVad::load(onnx_path());
  ASSERT_TRUE(model.has_value());
  const std::vector<float> probs = vad->probabilities(audio).value();
  // The deployment steps through the recording a block at a time: the same probabilities up
  // to the GEMM's rounding of other batch sizes.
  const std::vector<float> want = (*model)->probabilities(audio);
  ASSERT_EQ(probs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(probs[i], want[i], 1e-5) << i;
  const std::vector<media::SpeechSpan> spans = vad->spans(audio).value();
  EXPECT_EQ(spans.size(), media::speech_spans(probs, int64_t(audio.size()), vad->settings().params).size());
  ASSERT_FALSE(spans.empty());
  // All speech in jfk (2 s .. 13 s), and its first phrase found.
  EXPECT_GE(spans.front().start, 2 * kRate);
  EXPECT_LE(spans.back().end, 13 * kRate + kRate / 2);
  EXPECT_LT(spans.front().start, 2 * kRate + kRate / 2);
}

TEST(VoiceActivity, EnergyRecordingsAreTheBuiltInDetectors) {
  const auto vad = load("energy");
  const std::vector<float> audio = jfk_in_silence();
  const std::vector<float> probs = vad->probabilities(audio).value();
  EXPECT_EQ(probs, media::energy_vad_probabilities(audio));
  const std::vector<media::SpeechSpan> spans = vad->spans(audio).value();
  ASSERT_FALSE(spans.empty());
  for (const media::SpeechSpan& s : spans) {
    EXPECT_GE(s.start, 2 * kRate - kRate / 10);  // nothing in the leading digital silence
    EXPECT_LE(s.end, 13 * kRate + kRate / 10);
  }
}

TEST(VoiceActivity, SettingsRulesApplyToSpans) {
  VadSettings s;
  s.kind = "silero";
  s.deployment = silero_deployment().name();
  s.params.min_silence_ms = 2000;  // jfk's pauses (under 1.1 s) no longer end speech
  const auto vad = VoiceActivity::connect(s, [](serving::RequestPtr r) { return silero_deployment().submit(std::move(r)); });
  ASSERT_TRUE(vad.has_value());
  const std::vector<float> audio = jfk_in_silence();
  EXPECT_LT((*vad)->spans(audio)->size(), load("silero")->spans(audio)->size());
}

// Two transcriptions cutting their recordings at once: the deployment scores windows of both
// in the same forwards (its prism_vad_forward_streams series counts them).
TEST(VoiceActivity, ConcurrentRecordingsShareTheDeploymentsForwards) {
  const auto vad = load("silero");
  std::vector<float> a, b;
  while (a.size() < size_t(180 * kRate)) a.insert(a.end(), jfk().begin(), jfk().end());
  while (b.size() < size_t(150 * kRate)) b.insert(b.end(), jfk().rbegin(), jfk().rend());
  auto forwards = [](std::string_view bucket) {
    const std::string text = silero_metrics().render();
    const std::string series = "prism_vad_forward_streams" + std::string(bucket);
    const size_t at = text.find(series + " ");
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + series.size() + 1));
  };
  const std::string labels = "{deployment=\"asr-vad\",modality=\"vad\"";
  const double single_before = forwards("_bucket" + labels + ",le=\"1\"}");
  const double all_before = forwards("_count" + labels + "}");
  std::vector<media::SpeechSpan> spans_a, spans_b;
  std::thread other([&] { spans_b = vad->spans(b).value(); });
  spans_a = vad->spans(a).value();
  other.join();
  EXPECT_FALSE(spans_a.empty());
  EXPECT_FALSE(spans_b.empty());
  const double single = forwards("_bucket" + labels + ",le=\"1\"}") - single_before;
  const double all = forwards("_count" + labels + "}") - all_before;
  EXPECT_GT(all, 0.0);
  EXPECT_LT(single, all) << "no forward held windows of both recordings";
}

// ---- live streams ---------------------------------------------------------------------

// Streams of different recordings stepped together, window by window (a stream joins late
// and one ends early), must give what each recording's probabilities() gives.
void expect_streams_match_recordings(const VoiceActivity& vad, double tolerance) {
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<std::vector<float>> recordings;
  for (int i = 0; i < 11; ++i) {
    const size_t offset = size_t(i) * 8000;
    std::vector<float> r(jfk().begin() + offset, jfk().begin() + offset + size_t(40 + 3 * i) * 512);
    if (i % 3 == 1) for (float& v : r) v += noise(rng);
    recordings.push_back(std::move(r));
  }
  std::vector<std::unique_ptr<VoiceActivity::Stream>> streams;
  for (size_t i = 0; i < recordings.size(); ++i) streams.push_back(vad.new_stream());
  std::vector<std::vector<float>> got(recordings.size());
  const int64_t late = 5;  // stream 0 starts at this step
  for (int64_t step = 0;; ++step) {
    std::vector<std::span<const float>> windows;
    std::vector<VoiceActivity::Stream*> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < recordings.size(); ++i) {
      const int64_t w = i == 0 ? step - late : step;
      if (w < 0 || size_t(w + 1) * 512 > recordings[i].size()) continue;
      windows.emplace_back(recordings[i].data() + w * 512, 512);
      batch.push_back(streams[i].get());
      who.push_back(i);
    }
    if (batch.empty()) break;
    const std::vector<float> p = vad.step(windows, batch).value();
    ASSERT_EQ(p.size(), batch.size());
    for (size_t j = 0; j < who.size(); ++j) got[who[j]].push_back(p[j]);
  }
  for (size_t i = 0; i < recordings.size(); ++i) {
    const std::vector<float> want = vad.probabilities(recordings[i]).value();
    ASSERT_EQ(got[i].size(), want.size()) << "stream " << i;
    EXPECT_EQ(streams[i]->windows(), int64_t(want.size()));
    for (size_t w = 0; w < want.size(); ++w) EXPECT_NEAR(got[i][w], want[w], tolerance) << "stream " << i << " window " << w;
  }
}

TEST(VoiceActivity, SileroStreamsSteppedTogetherMatchTheirRecordings) {
  // Batches of different sizes round differently inside the GEMMs; nothing more.
  expect_streams_match_recordings(*load("silero"), 1e-5);
}

TEST(VoiceActivity, EnergyStreamsSteppedTogetherMatchTheirRecordings) {
  expect_streams_match_recordings(*load("energy"), 0.0);
}

TEST(VoiceActivity, AStreamsStateIsItsOwn) {
  // The same audio in two streams gives the same probabilities whatever a third stream does.
  const auto vad = load("silero");
  auto a = vad->new_stream(), b = vad->new_stream(), c = vad->new_stream();
  std::vector<float> speech(jfk().begin() + 8000, jfk().begin() + 8000 + 512);
  std::vector<float> loud(512, 0.9f);
  for (int i = 0; i < 10; ++i) {
    const std::span<const float> ws[] = {speech, speech, i % 2 ? loud : speech};
    VoiceActivity::Stream* ss[] = {a.get(), b.get(), c.get()};
    const std::vector<float> p = vad->step(ws, ss).value();
    EXPECT_NEAR(p[0], p[1], 1e-6) << i;
  }
  EXPECT_EQ(a->windows(), 10);
  EXPECT_TRUE(vad->step({}, {})->empty());
}

}  // namespace
}  // namespace prism::pipelines::transcribe

// SileroVad on the real silero_vad.onnx. Parity: tests/reference/silero_vad.py runs the same
// file through a numpy interpreter of its ONNX graph (the If on sr, the nested Ifs, the LSTM
// op), an independent check of the network as written here; 48 consecutive windows of jfk
// and of synthetic audio, the state carried, probabilities and (h, c) after every window
// within 1e-4 — one stream at a time, as a batch of streams, and through probabilities().
// Real model: jfk.flac between digital silence and white noise at -40 dBFS; speech is found
// where jfk speaks (its loud frames covered, its pauses mostly not) and no span starts in the
// silence or the noise.
#include "models/vad/silero_vad.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "base/file.h"
#include "formats/safetensors.h"
#include "media/audio.h"
#include "media/speech_spans.h"
#include "test_util/paths.h"
#include "test_util/speech_samples.h"
#include "test_util/reference_io.h"

namespace prism::models {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kRate = 16000;
constexpr int kParityWindows = 48;

std::string onnx_path() { return test::testdata_dir() + "/vad/silero_vad.onnx"; }

const SileroVad& vad() {
  static const std::unique_ptr<SileroVad> model = [] {
    Result<std::unique_ptr<SileroVad>> m = SileroVad::load(onnx_path());
    PRISM_CHECK_MSG(m.has_value(), m.status().to_string().c_str());
    return std::move(*m);
  }();
  return *model;
}

using test::jfk;

// Random-ish audio that moves the network through its range: silence, noise, a voiced-like
// harmonic tone with a syllable-rate envelope, a clipped square wave. Deterministic.
std::vector<float> synthetic(int64_t n) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = double(i) / kRate;
    const int part = int(i * 4 / n);
    float v = 0;
    if (part == 1) v = 0.02f * noise(rng);
    if (part == 2) {
      const double f0 = 140 + 30 * std::sin(2 * M_PI * 1.5 * t);
      for (int h = 1; h <= 8; ++h) v += float(std::sin(2 * M_PI * f0 * h * t) / h);
      v *= float(0.25 * (1 + std::sin(2 * M_PI * 4 * t))) + 0.01f * noise(rng);
    }
    if (part == 3) v = std::sin(2 * M_PI * 300 * t) > 0 ? 1.0f : -1.0f;
    x[size_t(i)] = v;
  }
  return x;
}

struct Case {
  std::string name;
  std::vector<float> samples;
};

// Same number of windows each (the reference runs them as one batch); the synthetic one ends
// in a partial window, which probabilities() zero-pads.
const std::vector<Case>& cases() {
  static const std::vector<Case> c = [] {
    const int64_t n = kParityWindows * 512;
    std::vector<float> speech(jfk().begin(), jfk().begin() + n);  // silence, then "And so my fellow"
    return std::vector<Case>{{"jfk", speech}, {"synthetic", synthetic(n - 200)}};
  }();
  return c;
}

// The interpreter's outputs for cases(), computed once per process.
const formats::SafetensorsFile& reference() {
  static const std::shared_ptr<const formats::SafetensorsFile> file = [] {
    const std::string dir = test::scratch_dir("silero_vad_reference");
    std::vector<std::pair<std::string, Tensor>> inputs;
    for (const Case& c : cases())
      inputs.emplace_back(c.name, Tensor::from<float>(c.samples, {int64_t(c.samples.size())}));
    PRISM_CHECK(formats::write_safetensors(dir + "/input.safetensors", inputs).ok());
    const Status s = test::run_reference(
        "silero_vad.py", "--onnx " + onnx_path() + " --input " + dir + "/input.safetensors --out " + dir + " --batch");
    PRISM_CHECK_MSG(s.ok(), s.to_string().c_str());
    Result<std::shared_ptr<const formats::SafetensorsFile>> f = test::open_reference(dir);
    PRISM_CHECK(f.has_value());
    return *f;
  }();
  return *file;
}

Tensor expected(const std::string& name) {
  Result<Tensor> t = reference().get(name);
  PRISM_CHECK_MSG(t.has_value(), name.c_str());
  return *t;
}

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double e = 0;
  for (int64_t i = 0; i < n; ++i) e = std::max(e, double(std::fabs(a[i] - b[i])));
  return e;
}

// Windows of a recording, the last zero-padded, as probabilities() reads them.
std::vector<std::vector<float>> windows_of(const std::vector<float>& x) {
  std::vector<std::vector<float>> w;
  for (size_t i = 0; i < x.size(); i += 512) {
    w.emplace_back(512, 0.0f);
    std::copy(x.begin() + i, x.begin() + std::min(x.size(), i + 512), w.back().begin());
  }
  return w;
}

// Runs every case's windows through step() with all cases in each call when `batched`, else
// one case at a time; returns the worst difference from the reference over probs, h and c.
double parity_error(bool batched) {
  const std::vector<Case>& cs = cases();
  std::vector<std::vector<std::vector<float>>> windows;
  for (const Case& c : cs) windows.push_back(windows_of(c.samples));
  std::vector<SileroState> states(cs.size());
  std::vector<std::vector<float>> probs(cs.size()), h(cs.size()), c(cs.size());
  for (int w = 0; w < kParityWindows; ++w) {
    for (size_t first = 0; first < cs.size(); first += batched ? cs.size() : 1) {
      const size_t count = batched ? cs.size() : 1;
      std::vector<std::span<const float>> in;
      std::vector<SileroState*> st;
      for (size_t i = first; i < first + count; ++i) {
        in.emplace_back(windows[i][size_t(w)]);
        st.push_back(&states[i]);
      }
      const std::vector<float> p = vad().step(in, st);
      for (size_t i = first; i < first + count; ++i) {
        probs[i].push_back(p[i - first]);
        h[i].insert(h[i].end(), states[i].h.begin(), states[i].h.end());
        c[i].insert(c[i].end(), states[i].c.begin(), states[i].c.end());
      }
    }
  }
  double worst = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    const Tensor rp = expected(cs[i].name + ".probs"), rh = expected(cs[i].name + ".h"), rc = expected(cs[i].name + ".c");
    EXPECT_EQ(rp.numel(), kParityWindows);
    EXPECT_EQ(rh.shape(), (Dims{kParityWindows, 128}));
    const double e = std::max({max_abs_diff(probs[i].data(), rp.data<float>(), kParityWindows),
                               max_abs_diff(h[i].data(), rh.data<float>(), rh.numel()),
                               max_abs_diff(c[i].data(), rc.data<float>(), rc.numel())});
    std::printf("  %s: max |C++ - interpreter| over probs, h, c = %.3g (%s)\n", cs[i].name.c_str(), e,
                batched ? "batched" : "one stream");
    worst = std::max(worst, e);
  }
  return worst;
}

// One test (one Python run under ctest, which starts a process per test).
TEST(SileroVad, MatchesTheOnnxInterpreter) {
  {
    SCOPED_TRACE("the parity data means something: jfk's windows go from silence to speech");
    const Tensor p = expected("jfk.probs");
    const auto [lo, hi] = std::minmax_element(p.data<float>(), p.data<float>() + p.numel());
    EXPECT_LT(*lo, 0.1f);
    EXPECT_GT(*hi, 0.9f);
  }
  {
    SCOPED_TRACE("step(), one stream at a time");
    EXPECT_LE(parity_error(false), 1e-4);
  }
  {
    SCOPED_TRACE("step(), the streams as one batch");
    EXPECT_LE(parity_error(true), 1e-4);
  }
  for (const Case& c : cases()) {
    SCOPED_TRACE("probabilities() of " + c.name);
    const std::vector<float> p = vad().probabilities(c.samples);
    ASSERT_EQ(p.size(), size_t(kParityWindows));
    EXPECT_LE(max_abs_diff(p.data(), expected(c.name + ".probs").data<float>(), kParityWindows), 1e-4);
  }
}

TEST(SileroVad, EdgeCasesOfInput) {
  EXPECT_TRUE(vad().probabilities({}).empty());
  const std::vector<float> one(100, 0.1f);
  EXPECT_EQ(vad().probabilities(one).size(), 1u);
  // NaN and infinity count as silence: no NaN out, and the state stays usable.
  std::vector<float> bad(2048, 0.0f);
  bad[3] = NAN;
  bad[700] = INFINITY;
  bad[1500] = -INFINITY;
  const std::vector<float> p = vad().probabilities(bad);
  const std::vector<float> zeros = vad().probabilities(std::vector<float>(2048, 0.0f));
  ASSERT_EQ(p.size(), 4u);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_FLOAT_EQ(p[i], zeros[i]);
  SileroState s;
  SileroState* states[1] = {&s};
  const std::span<const float> w(bad.data(), 512);
  EXPECT_TRUE(std::isfinite(vad().step({&w, 1}, states)[0]));
  for (float v : s.h) EXPECT_TRUE(std::isfinite(v));
  EXPECT_TRUE(vad().step({}, {}).empty());
}

TEST(SileroVad, LoadErrorsNameTheFile) {
  const std::string dir = test::scratch_dir("silero_bad_files");
  Result<std::unique_ptr<SileroVad>> m = SileroVad::load(dir + "/missing.onnx");
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.status().code(), StatusCode::not_found);
  EXPECT_THAT(m.status().message(), HasSubstr("missing.onnx"));

  ASSERT_TRUE(write_file(dir + "/text.onnx", "not a model at all").ok());
  m = SileroVad::load(dir + "/text.onnx");
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.status().code(), StatusCode::invalid_argument);
  EXPECT_THAT(m.status().message(), HasSubstr("text.onnx"));

  // A valid ONNX file (a ModelProto with an empty graph: field 7, length 0) that is not Silero.
  ASSERT_TRUE(write_file(dir + "/other.onnx", std::string("\x08\x08\x3a\x00", 4)).ok());
  m = SileroVad::load(dir + "/other.onnx");
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.status().code(), StatusCode::invalid_argument);
  EXPECT_THAT(m.status().message(), HasSubstr("is not a Silero VAD v5/v6 model"));
}

// 2 s of digital silence and 2 s of white noise at -40 dBFS (RMS 0.01) before and after jfk.
struct Padded {
  std::vector<float> samples;
  int64_t jfk_start = 0, jfk_end = 0;
};
Padded jfk_between_silence_and_noise() {
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  Padded p;
  auto append_silence = [&] { p.samples.insert(p.samples.end(), 2 * kRate, 0.0f); };
  auto append_noise = [&] {
    for (int64_t i = 0; i < 2 * kRate; ++i) p.samples.push_back(noise(rng));
  };
  append_silence();
  append_noise();
  p.jfk_start = int64_t(p.samples.size());
  p.samples.insert(p.samples.end(), jfk().begin(), jfk().end());
  p.jfk_end = int64_t(p.samples.size());
  append_noise();
  append_silence();
  return p;
}

// NOTE: jfk speaks in four phrases with pauses of 0.5 to 1 s between them (at the clip's
// background level, about -40 dBFS), so speech spans cannot cover all of [0.3 s, 10.5 s].
// What counts as speech is read from the signal itself, per 100 ms frame of that range:
// frames louder than -30 dBFS are speech and must be covered; frames at the background level
// (below -38 dBFS) are the pauses and must mostly not be.
TEST(SileroVad, FindsJfkSpeechAndNothingInSilenceOrNoise) {
  ASSERT_NEAR(double(jfk().size()) / kRate, 11.0, 0.01);
  const Padded audio = jfk_between_silence_and_noise();
  const std::vector<float> probs = vad().probabilities(audio.samples);
  const auto t0 = std::chrono::steady_clock::now();  // timed again, without oneDNN's first-call JIT
  EXPECT_EQ(vad().probabilities(audio.samples), probs);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  probabilities(): %zu windows in %.1f ms, %.3f ms per window (informational)\n", probs.size(), ms,
              ms / double(probs.size()));
  ASSERT_EQ(probs.size(), (audio.samples.size() + 511) / 512);

  // Raw probabilities: below the threshold in the silence and noise before jfk, and after it
  // once the LSTM has let go of the clip's last sounds (half a second).
  for (size_t i = 0; i < probs.size(); ++i) {
    const int64_t begin = int64_t(i) * 512, end = begin + 512;
    if (end <= audio.jfk_start || begin >= audio.jfk_end + kRate / 2) EXPECT_LT(probs[i], 0.5f) << "window " << i;
  }

  const std::vector<media::SpeechSpan> spans = media::speech_spans(probs, int64_t(audio.samples.size()), media::VadParams{});
  ASSERT_FALSE(spans.empty());
  for (const media::SpeechSpan& s : spans) {
    std::printf("  span %.2f s .. %.2f s of jfk\n", double(s.start - audio.jfk_start) / kRate,
                double(s.end - audio.jfk_start) / kRate);
    EXPECT_GE(s.start, audio.jfk_start) << "a span starts in the silence or noise before jfk";
    EXPECT_LT(s.start, audio.jfk_end) << "a span starts in the noise or silence after jfk";
    EXPECT_LE(s.end, audio.jfk_end + kRate / 2) << "a span runs on into the noise after jfk";
  }

  const int64_t frame = kRate / 10;
  double loud = 0, loud_covered = 0, quiet = 0, quiet_covered = 0;
  for (int64_t f = audio.jfk_start + 3 * frame; f + frame <= audio.jfk_start + 105 * frame; f += frame) {
    double energy = 0;
    for (int64_t i = f; i < f + frame; ++i) energy += double(audio.samples[size_t(i)]) * audio.samples[size_t(i)];
    const double db = 10 * std::log10(energy / double(frame) + 1e-12);
    int64_t overlap = 0;
    for (const media::SpeechSpan& s : spans) overlap += std::max<int64_t>(0, std::min(s.end, f + frame) - std::max(s.start, f));
    const double covered = double(overlap) / double(frame);
    if (db > -30) loud += 1, loud_covered += covered;
    if (db < -38) quiet += 1, quiet_covered += covered;
  }
  std::printf("  speech frames covered %.0f%% (%.0f frames), pause frames covered %.0f%% (%.0f frames)\n",
              100 * loud_covered / loud, loud, 100 * quiet_covered / quiet, quiet);
  ASSERT_GT(loud, 50);
  ASSERT_GT(quiet, 10);
  EXPECT_GE(loud_covered / loud, 0.9);
  EXPECT_LE(quiet_covered / quiet, 0.5);
}

}  // namespace
}  // namespace prism::models

// media::EnergyVad, the detector that needs no model: on jfk.flac (decoded) framed by 2 s of
// digital silence and 2 s of white noise at -40 dBFS on both sides, speech_spans over its
// probabilities finds the speech, inside the speech part, and nothing in the silence or the
// noise. Plus synthetic cases: silence, noise alone, a voiced tone over noise.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/file.h"
#include "media/audio.h"
#include "media/speech_spans.h"
#include "test_util/paths.h"

namespace prism::media {
namespace {

constexpr int kRate = kSpeechSampleRate;

std::vector<float> white_noise(size_t n, double dbfs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, float(std::pow(10.0, dbfs / 20.0)));  // RMS = dbfs
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// A voiced sound: 150 Hz with its harmonics up to 3 kHz (falling 6 dB an octave), at about
// -20 dBFS.
std::vector<float> voiced(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const double t = double(i) / kRate;
    double v = 0;
    for (int h = 1; h * 150 <= 3000; ++h) v += std::sin(2 * M_PI * 150 * h * t) / h;
    x[i] = float(0.08 * v);
  }
  return x;
}

void append(std::vector<float>& to, const std::vector<float>& x) { to.insert(to.end(), x.begin(), x.end()); }

std::vector<float> decoded_jfk() {
  auto bytes = read_file(test::testdata_dir() + "/audio/jfk.flac");
  EXPECT_TRUE(bytes.has_value()) << bytes.status().to_string();
  if (!bytes) return {};
  auto audio = decode_audio(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  EXPECT_TRUE(audio.has_value()) << audio.status().to_string();
  return audio ? std::move(audio->samples) : std::vector<float>{};
}

TEST(EnergyVad, FindsJfkSpeechAndNothingInSilenceOrNoise) {
  const std::vector<float> jfk = decoded_jfk();
  ASSERT_FALSE(jfk.empty());
  std::vector<float> audio(size_t(2 * kRate), 0.0f);
  append(audio, white_noise(size_t(2 * kRate), -40.0, 1));
  const int64_t speech_begin = int64_t(audio.size());
  append(audio, jfk);
  const int64_t speech_end = int64_t(audio.size());
  append(audio, white_noise(size_t(2 * kRate), -40.0, 2));
  append(audio, std::vector<float>(size_t(2 * kRate), 0.0f));

  const std::vector<float> probs = energy_vad_probabilities(audio);
  ASSERT_EQ(probs.size(), (audio.size() + kVadWindow - 1) / kVadWindow);
  for (float p : probs) ASSERT_TRUE(p >= 0.0f && p <= 1.0f) << p;
  const std::vector<SpeechSpan> spans = speech_spans(probs, int64_t(audio.size()), {});
  ASSERT_FALSE(spans.empty());

  // Every span (padded) lies inside [0.2 s, 10.8 s] of the speech part; JFK speaks from
  // about 0.3 s to 10.2 s.
  int64_t speech_samples = 0;
  for (const SpeechSpan& s : spans) {
    const double start_s = double(s.start - speech_begin) / kRate, end_s = double(s.end - speech_begin) / kRate;
    std::printf("[ measured ] speech %.2f s - %.2f s of jfk\n", start_s, end_s);
    EXPECT_GE(start_s, 0.2);
    EXPECT_LE(end_s, 10.8);
    EXPECT_LE(s.end, speech_end);
    speech_samples += s.end - s.start;
  }
  // And it finds the speech: the first words, the last ones, and most of what is between
  // ("And so my fellow Americans", "ask not", "what your country can do for you", "ask what
  // you can do for your country" together last about 7 s).
  EXPECT_LE(double(spans.front().start - speech_begin) / kRate, 0.5);
  EXPECT_GE(double(spans.back().end - speech_begin) / kRate, 9.9);
  EXPECT_GE(double(speech_samples) / kRate, 5.0);
}

TEST(EnergyVad, SilenceAndNoiseAreNotSpeech) {
  std::vector<float> audio(size_t(kRate), 0.0f);
  append(audio, white_noise(size_t(3 * kRate), -40.0, 3));
  append(audio, white_noise(size_t(3 * kRate), -20.0, 4));  // a sudden loud noise
  append(audio, std::vector<float>(size_t(kRate), 0.0f));
  const std::vector<float> probs = energy_vad_probabilities(audio);
  for (size_t i = 0; i < probs.size(); ++i) ASSERT_LT(probs[i], 0.35f) << "window " << i;
  EXPECT_TRUE(speech_spans(probs, int64_t(audio.size()), {}).empty());
}

TEST(EnergyVad, VoicedSoundOverNoiseIsSpeech) {
  std::vector<float> audio = white_noise(size_t(2 * kRate), -45.0, 5);
  std::vector<float> tone = voiced(size_t(kRate));
  const std::vector<float> bed = white_noise(tone.size(), -45.0, 6);
  for (size_t i = 0; i < tone.size(); ++i) tone[i] += bed[i];
  append(audio, tone);
  append(audio, white_noise(size_t(2 * kRate), -45.0, 7));
  const std::vector<SpeechSpan> spans = speech_spans(energy_vad_probabilities(audio), int64_t(audio.size()), {});
  ASSERT_EQ(spans.size(), 1u);
  // The tone is [2 s, 3 s); spans are window-aligned (32 ms) and padded by 30 ms.
  EXPECT_NEAR(double(spans[0].start) / kRate, 2.0, 0.07);
  EXPECT_NEAR(double(spans[0].end) / kRate, 3.0, 0.07);
}

TEST(EnergyVad, OddWindowsAreHandled) {
  EnergyVad vad;
  EXPECT_EQ(vad.push({}), 0.0f);
  const std::vector<float> short_window(100, 0.5f), long_window(2000, 0.1f);
  const float a = vad.push(short_window), b = vad.push(long_window);
  EXPECT_TRUE(a >= 0.0f && a <= 1.0f);
  EXPECT_TRUE(b >= 0.0f && b <= 1.0f);
  EXPECT_TRUE(energy_vad_probabilities({}).empty());
  EXPECT_EQ(energy_vad_probabilities(std::vector<float>(513, 0.0f)).size(), 2u);
}

}  // namespace
}  // namespace prism::media

// media::log_mel_spectrogram and mel_filters against tests/reference/whisper_mel.py (whisper's
// own steps in PyTorch: torch.stft, the filters of whisper's mel_filters.npz). The test writes
// 16 kHz samples (jfk.flac decoded by media::decode_audio, and a synthetic signal), the
// script writes what whisper makes of them; the bar is 1e-4 absolute on the log-mel (values
// are about in [-1, 1.5]) and 1e-6 on the filters. Plus whisper's own test_audio check on
// jfk: max - min of the log-mel <= 2.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/file.h"
#include "formats/safetensors.h"
#include "media/audio.h"
#include "media/log_mel.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism::media {
namespace {

std::string filters_npz() { return test::testdata_dir() + "/whisper/mel_filters.npz"; }

// Runs whisper_mel.py on `samples` (once per name and process) and opens what it wrote.
std::shared_ptr<const formats::SafetensorsFile> whisper_reference(const std::string& name,
                                                                  const std::vector<float>& samples) {
  const std::string input = test::scratch_dir(name + "_input") + "/samples.safetensors";
  const Status written = formats::write_safetensors(
      input, {{"samples", Tensor::from(std::span<const float>(samples), {int64_t(samples.size())})}});
  EXPECT_TRUE(written.ok()) << written.to_string();
  auto dir = test::generate_reference("whisper_mel.py", name, "--samples " + input + " --filters " + filters_npz());
  EXPECT_TRUE(dir.has_value()) << dir.status().to_string();
  if (!dir) return nullptr;
  auto file = formats::SafetensorsFile::open(*dir + "/mel.safetensors");
  EXPECT_TRUE(file.has_value()) << file.status().to_string();
  return file ? *file : nullptr;
}

Tensor as_tensor(const LogMel& mel) {
  return Tensor::from(std::span<const float>(mel.values), {int64_t(mel.n_mels), int64_t(mel.frames)});
}

// Compares one case and returns its max abs error (reported in the test's output).
double expect_matches(const formats::SafetensorsFile& ref, const std::string& key, const LogMel& got) {
  auto expected = ref.get(key);
  EXPECT_TRUE(expected.has_value()) << key;
  if (!expected) return INFINITY;
  EXPECT_EQ(got.n_mels, expected->size(0)) << key;
  EXPECT_EQ(got.frames, expected->size(1)) << key;
  if (got.n_mels != expected->size(0) || got.frames != expected->size(1)) return INFINITY;
  const test::ErrorStats stats = test::compare(as_tensor(got), *expected);
  EXPECT_LE(stats.max_abs_error, 1e-4) << key << ": " << stats.to_string();
  return stats.max_abs_error;
}

void expect_matches_whisper(const std::string& name, const std::vector<float>& samples) {
  auto ref = whisper_reference(name, samples);
  ASSERT_NE(ref, nullptr);
  for (int n_mels : {80, 128}) {
    const std::string prefix = "log_mel." + std::to_string(n_mels);
    const LogMel padded = log_mel_spectrogram(samples, n_mels);
    EXPECT_EQ(padded.frames, kWhisperChunkFrames);
    const double padded_error = expect_matches(*ref, prefix + ".padded", padded);
    const LogMel unpadded = log_mel_spectrogram(samples, n_mels, 0);
    EXPECT_EQ(unpadded.frames, int(samples.size() / kWhisperHop));
    const double unpadded_error = expect_matches(*ref, prefix + ".unpadded", unpadded);
    std::printf("[ measured ] %s n_mels %d: max |prism - torch| padded %.3g, unpadded %.3g\n", name.c_str(), n_mels,
                padded_error, unpadded_error);
  }
}

// A chirp from 100 Hz to 7 kHz with a 440 Hz tone, a little noise and a silent stretch:
// energy in every mel bin, and a length that is not a multiple of the hop.
std::vector<float> synthetic_signal(size_t n) {
  std::vector<float> x(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  const double seconds = double(n) / kSpeechSampleRate;
  for (size_t i = 0; i < n; ++i) {
    const double t = double(i) / kSpeechSampleRate;
    const double chirp_phase = 2 * M_PI * (100 * t + (7000 - 100) * t * t / (2 * seconds));
    const bool silent = t > 0.5 && t < 0.6;
    x[i] = silent ? 0.0f : float(0.4 * std::sin(chirp_phase) + 0.2 * std::sin(2 * M_PI * 440 * t)) + noise(rng);
  }
  return x;
}

std::vector<float> decoded_jfk() {
  auto bytes = read_file(test::testdata_dir() + "/audio/jfk.flac");
  EXPECT_TRUE(bytes.has_value()) << bytes.status().to_string();
  if (!bytes) return {};
  auto audio = decode_audio(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  EXPECT_TRUE(audio.has_value()) << audio.status().to_string();
  return audio ? std::move(audio->samples) : std::vector<float>{};
}

TEST(MelFilters, EqualWhisperNpzForEightyAndOneTwentyEight) {
  auto ref = whisper_reference("whisper_mel_synthetic", synthetic_signal(21937));
  ASSERT_NE(ref, nullptr);
  for (int n_mels : {80, 128}) {
    auto expected = ref->get("mel_filters." + std::to_string(n_mels));
    ASSERT_TRUE(expected.has_value());
    const std::vector<float> got = mel_filters(n_mels);
    ASSERT_EQ(int64_t(got.size()), expected->numel());
    const test::ErrorStats stats =
        test::compare(Tensor::from(std::span<const float>(got), {n_mels, kWhisperFft / 2 + 1}), *expected);
    EXPECT_LE(stats.max_abs_error, 1e-6) << stats.to_string();
    std::printf("[ measured ] mel_filters(%d) vs mel_filters.npz: %s\n", n_mels, stats.to_string().c_str());
  }
}

TEST(LogMel, SyntheticSignalMatchesTorch) { expect_matches_whisper("whisper_mel_synthetic", synthetic_signal(21937)); }

TEST(LogMel, JfkMatchesTorch) {
  const std::vector<float> jfk = decoded_jfk();
  ASSERT_FALSE(jfk.empty());
  expect_matches_whisper("whisper_mel_jfk", jfk);
}

TEST(LogMel, JfkPassesWhisperAudioTest) {
  // openai/whisper tests/test_audio.py: 10-12 s at 16 kHz, 0 < std < 1, and on the log-mel
  // of the unpadded audio, max - min <= 2.
  const std::vector<float> jfk = decoded_jfk();
  ASSERT_FALSE(jfk.empty());
  EXPECT_GE(jfk.size(), 160000u);
  EXPECT_LE(jfk.size(), 192000u);
  double sum = 0, sum_sq = 0;
  for (float x : jfk) sum += x, sum_sq += double(x) * x;
  const double mean = sum / double(jfk.size());
  const double std_dev = std::sqrt(sum_sq / double(jfk.size()) - mean * mean);
  EXPECT_GT(std_dev, 0.0);
  EXPECT_LT(std_dev, 1.0);
  const LogMel mel = log_mel_spectrogram(jfk, 80, 0);
  const auto [lo, hi] = std::minmax_element(mel.values.begin(), mel.values.end());
  EXPECT_LE(*hi - *lo, 2.0f);
}

TEST(LogMel, PadsOrTrimsToThirtySeconds) {
  std::vector<float> long_audio = synthetic_signal(kWhisperChunkSamples + 12345);
  const LogMel trimmed = log_mel_spectrogram(long_audio, 80);
  ASSERT_EQ(trimmed.frames, kWhisperChunkFrames);
  long_audio.resize(kWhisperChunkSamples);
  const LogMel exact = log_mel_spectrogram(long_audio, 80, 0);
  ASSERT_EQ(exact.frames, kWhisperChunkFrames);
  EXPECT_EQ(trimmed.values, exact.values);  // trimming first is the same as giving 30 s

  const LogMel custom = log_mel_spectrogram(long_audio, 80, 16000);
  EXPECT_EQ(custom.frames, 100);
}

TEST(LogMel, ShortAndEmptyInputsGiveWellFormedOutput) {
  EXPECT_EQ(log_mel_spectrogram({}, 80, 0).frames, 0);
  EXPECT_EQ(log_mel_spectrogram(synthetic_signal(159), 80, 0).frames, 0);
  for (size_t n : {1, 160, 199, 401}) {  // reflect padding longer than the signal included
    const LogMel mel = log_mel_spectrogram(synthetic_signal(n), 80, 0);
    EXPECT_EQ(mel.frames, int(n / kWhisperHop));
    for (float v : mel.values) ASSERT_TRUE(std::isfinite(v)) << n;
  }
  // Silence: every value is the clamp floor, (-10 + 4) / 4 (log10 of the 1e-10 floor).
  const LogMel silence = log_mel_spectrogram(std::vector<float>(1600, 0.0f), 80);
  ASSERT_EQ(silence.frames, kWhisperChunkFrames);
  for (float v : silence.values) ASSERT_FLOAT_EQ(v, -1.5f);
}

TEST(LogMel, OtherMelCountsWork) {
  const std::vector<float> x = synthetic_signal(8000);
  for (int n_mels : {1, 40, 512}) {
    const LogMel mel = log_mel_spectrogram(x, n_mels, 0);
    EXPECT_EQ(mel.n_mels, n_mels);
    EXPECT_EQ(mel.values.size(), size_t(n_mels) * 50);
  }
}

}  // namespace
}  // namespace prism::media

// decode_audio, to_speech_rate and pcm16_to_speech on real values: jfk.flac (44.1 kHz stereo
// 24-bit, 11.0 s) as it is and rewritten in every format through test_util/audio_writer (the
// same samples must come out), sines at other rates and channel counts (frequency, level and
// length preserved, nothing above 8 kHz folded back), and PCM16 frames.
#include "media/audio.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "media/audio_resample.h"
#include "test_util/audio_writer.h"
#include "test_util/paths.h"

namespace prism::media {
namespace {

using test::AudioFormat;
using test::AudioSpec;

std::vector<uint8_t> file_bytes(const std::string& path) {
  Result<std::string> text = read_file(path);
  EXPECT_TRUE(text.has_value()) << text.status().to_string();
  if (!text.has_value()) return {};
  return {text->begin(), text->end()};
}

std::string jfk_path() { return test::testdata_dir() + "/audio/jfk.flac"; }

// jfk.flac's samples as libsndfile reads them: 44.1 kHz stereo.
const test::PcmAudio& jfk_source() {
  static const test::PcmAudio pcm = [] {
    Result<test::PcmAudio> read = test::read_audio_file(jfk_path());
    EXPECT_TRUE(read.has_value()) << read.status().to_string();
    return read.has_value() ? std::move(read).value() : test::PcmAudio{};
  }();
  return pcm;
}

// jfk.flac through decode_audio: the reference every other format is compared with.
const Audio& jfk_decoded() {
  static const Audio audio = [] {
    Result<Audio> decoded = decode_audio(file_bytes(jfk_path()));
    EXPECT_TRUE(decoded.has_value()) << decoded.status().to_string();
    return decoded.has_value() ? std::move(decoded).value() : Audio{};
  }();
  return audio;
}

double rms(std::span<const float> x) {
  double sum = 0;
  for (float v : x) sum += double(v) * v;
  return x.empty() ? 0 : std::sqrt(sum / double(x.size()));
}

struct Agreement {
  double max_abs_diff = 0;
  double correlation = 0;
  double snr_db = 0;  // reference energy over difference energy
};

// Over the common length.
Agreement agreement(std::span<const float> x, std::span<const float> reference) {
  const size_t n = std::min(x.size(), reference.size());
  double xy = 0, xx = 0, yy = 0, diff = 0;
  Agreement a;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - reference[i];
    a.max_abs_diff = std::max(a.max_abs_diff, std::abs(d));
    xy += double(x[i]) * reference[i];
    xx += double(x[i]) * x[i];
    yy += double(reference[i]) * reference[i];
    diff += d * d;
  }
  a.correlation = xy / std::sqrt(xx * yy);
  a.snr_db = 10 * std::log10(yy / diff);
  return a;
}

// Frequency of a sine from its rising zero crossings (interpolated), between `from` and `to`.
double sine_frequency(std::span<const float> x, size_t from, size_t to, int rate) {
  double first = -1, last = -1;
  int cycles = 0;
  for (size_t i = from + 1; i < to; ++i) {
    if (x[i - 1] < 0 && x[i] >= 0) {
      const double t = double(i - 1) + x[i - 1] / (x[i - 1] - x[i]);
      if (first < 0) {
        first = t;
      } else {
        ++cycles;
      }
      last = t;
    }
  }
  return cycles > 0 ? cycles * rate / (last - first) : 0;
}

TEST(AudioDecode, JfkFlacIsElevenSecondsOfSpeech) {
  const Audio& audio = jfk_decoded();
  EXPECT_EQ(audio.format, "flac");
  EXPECT_EQ(audio.source_rate, 44100);
  EXPECT_EQ(audio.source_channels, 2);
  // 11.0 s: 176000 samples at 16 kHz.
  EXPECT_NEAR(double(audio.samples.size()), 176000, 1760);
  EXPECT_NEAR(audio.seconds(), 11.0, 0.11);
  const double mean = std::accumulate(audio.samples.begin(), audio.samples.end(), 0.0) / double(audio.samples.size());
  double variance = 0;
  for (float v : audio.samples) variance += (v - mean) * (v - mean);
  const double std_dev = std::sqrt(variance / double(audio.samples.size()));
  EXPECT_GT(std_dev, 0.01);
  EXPECT_LT(std_dev, 1.0);
  for (float v : audio.samples) ASSERT_TRUE(std::isfinite(v) && std::abs(v) <= 1.0f) << v;

  // The same energy as the source's mean of channels (speech lies below 8 kHz).
  const test::PcmAudio& source = jfk_source();
  ASSERT_EQ(source.rate, 44100);
  ASSERT_EQ(source.channels, 2);
  std::vector<float> mono(size_t(source.num_frames()));
  for (size_t f = 0; f < mono.size(); ++f) mono[f] = 0.5f * (source.interleaved[2 * f] + source.interleaved[2 * f + 1]);
  EXPECT_NEAR(rms(audio.samples) / rms(mono), 1.0, 0.01);
  EXPECT_NEAR(double(audio.samples.size()), double(mono.size()) * 16000 / 44100, 2);
}

struct FormatCase {
  AudioFormat format;
  std::string container;  // Audio::format
  bool lossless;
};

class AudioFormats : public testing::TestWithParam<FormatCase> {};

// jfk's own samples (44.1 kHz stereo) written in each format decode to what jfk.flac does.
// Lossless: within 16-bit rounding (3e-5) carried through the resampler. Lossy: see below.
TEST_P(AudioFormats, JfkRewrittenDecodesToTheSameSamples) {
  const FormatCase& c = GetParam();
  const test::PcmAudio& source = jfk_source();
  Result<std::vector<uint8_t>> bytes =
      test::write_audio(source.interleaved, AudioSpec{c.format, source.rate, source.channels});
  ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
  Result<Audio> audio = decode_audio(*bytes);
  ASSERT_TRUE(audio.has_value()) << audio.status().to_string();
  EXPECT_EQ(audio->format, c.container);
  EXPECT_EQ(audio->source_channels, 2);
  EXPECT_EQ(audio->source_rate, c.format == AudioFormat::webm ? 48000 : 44100);
  const std::vector<float>& reference = jfk_decoded().samples;
  const Agreement a = agreement(audio->samples, reference);
  std::printf("%-10s %zu samples (reference %zu): max |diff| %.2e, correlation %.5f, SNR %.1f dB\n",
              test::audio_format_name(c.format).c_str(), audio->samples.size(), reference.size(), a.max_abs_diff,
              a.correlation, a.snr_db);
  if (c.lossless) {
    EXPECT_EQ(audio->samples.size(), reference.size());
    EXPECT_LT(a.max_abs_diff, 1e-4);
  } else {
    // The encoder's delay is undone (LAME header, mp4 edit list, Opus pre-skip): the same
    // length within one codec frame, and no shift. NOTE: measured at 192 kb/s MP3 and AAC,
    // 128 kb/s Opus and Vorbis at quality 0.9: correlation >= 0.9995, SNR 30-52 dB (MP3's
    // 30.5 dB is LAME's 0.26 dB level loss, see below). A shift of one sample at 16 kHz
    // drops jfk to correlation 0.922 and SNR 8.1 dB, so 0.99 and 20 dB catch any shift.
    EXPECT_NEAR(double(audio->samples.size()), double(reference.size()), 400);
    EXPECT_GT(a.correlation, 0.99);
    EXPECT_GT(a.snr_db, 20.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Jfk, AudioFormats,
    testing::Values(FormatCase{AudioFormat::wav_pcm16, "wav", true}, FormatCase{AudioFormat::wav_pcm24, "wav", true},
                    FormatCase{AudioFormat::wav_float, "wav", true}, FormatCase{AudioFormat::flac, "flac", true},
                    FormatCase{AudioFormat::ogg_vorbis, "ogg", false}, FormatCase{AudioFormat::mp3, "mp3", false},
                    FormatCase{AudioFormat::m4a, "mp4", false}, FormatCase{AudioFormat::webm, "webm", false}),
    [](const testing::TestParamInfo<FormatCase>& info) { return test::audio_format_name(info.param.format); });

// Ogg Opus through libsndfile, at 16 kHz mono: no resampling on the way back.
TEST(AudioDecode, OggOpusAtSpeechRate) {
  const std::vector<float>& speech = jfk_decoded().samples;
  Result<std::vector<uint8_t>> bytes = test::write_audio(speech, AudioSpec{AudioFormat::ogg_opus, 16000, 1});
  ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
  Result<Audio> audio = decode_audio(*bytes);
  ASSERT_TRUE(audio.has_value()) << audio.status().to_string();
  EXPECT_EQ(audio->format, "ogg");
  EXPECT_EQ(audio->source_rate, 16000);
  EXPECT_EQ(audio->source_channels, 1);
  EXPECT_NEAR(double(audio->samples.size()), double(speech.size()), 400);
  const Agreement a = agreement(audio->samples, speech);
  std::printf("ogg_opus   correlation %.5f, SNR %.1f dB\n", a.correlation, a.snr_db);
  EXPECT_GT(a.correlation, 0.99);
}

// A WebM written as a stream (MediaRecorder's: no duration, no index) decodes the same.
TEST(AudioDecode, WebmWithoutDuration) {
  const test::PcmAudio& source = jfk_source();
  AudioSpec spec{AudioFormat::webm, source.rate, source.channels};
  spec.seekable = false;
  Result<std::vector<uint8_t>> bytes = test::write_audio(source.interleaved, spec);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
  Result<Audio> audio = decode_audio(*bytes);
  ASSERT_TRUE(audio.has_value()) << audio.status().to_string();
  EXPECT_EQ(audio->format, "webm");
  EXPECT_GT(agreement(audio->samples, jfk_decoded().samples).correlation, 0.99);
}

struct RateCase {
  AudioFormat format;
  int rate;
  double hz;
};

class AudioRates : public testing::TestWithParam<RateCase> {};

// Stereo sines at other rates: left 0.8, right 0.4 → the mean, 0.6, at the same frequency,
// 2 s long at 16 kHz.
TEST_P(AudioRates, StereoSineKeepsFrequencyLevelAndLength) {
  const RateCase& c = GetParam();
  const std::vector<float> stereo = test::sine(c.hz, 2.0, c.rate, {0.8f, 0.4f});
  Result<std::vector<uint8_t>> bytes = test::write_audio(stereo, AudioSpec{c.format, c.rate, 2});
  ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
  Result<Audio> audio = decode_audio(*bytes);
  ASSERT_TRUE(audio.has_value()) << audio.status().to_string();
  EXPECT_EQ(audio->source_rate, c.rate);
  EXPECT_EQ(audio->source_channels, 2);
  const std::vector<float>& x = audio->samples;
  EXPECT_NEAR(double(x.size()), 32000, c.format == AudioFormat::mp3 ? 400 : 1);
  ASSERT_GT(x.size(), 30000u);
  // The steady middle (the resampler's filter rings at the ends).
  const size_t from = 4000, to = 28000;
  EXPECT_NEAR(sine_frequency(x, from, to, kSpeechSampleRate), c.hz, c.hz * 1e-4);
  const double amplitude = rms(std::span(x).subspan(from, to - from)) * std::sqrt(2.0);
  // NOTE: LAME encodes this pure tone 0.26 dB low (0.582): mpg123, through libsndfile,
  // decodes the same bytes to the same level.
  EXPECT_NEAR(amplitude, 0.6, c.format == AudioFormat::mp3 ? 0.025 : 0.002);
}

INSTANTIATE_TEST_SUITE_P(
    Sines, AudioRates,
    testing::Values(RateCase{AudioFormat::wav_float, 48000, 1000}, RateCase{AudioFormat::wav_pcm16, 48000, 7000},
                    RateCase{AudioFormat::wav_pcm16, 8000, 440}, RateCase{AudioFormat::flac, 8000, 3000},
                    RateCase{AudioFormat::wav_pcm24, 22050, 1234}, RateCase{AudioFormat::mp3, 48000, 1000}),
    [](const testing::TestParamInfo<RateCase>& info) {
      return test::audio_format_name(info.param.format) + "_" + std::to_string(info.param.rate) + "Hz_" +
             std::to_string(int(info.param.hz));
    });

// A tone above 8 kHz cannot be represented at 16 kHz: the resampler removes it instead of
// folding it back as a 7 kHz alias.
TEST(AudioDecode, AboveEightKilohertzIsFilteredNotAliased) {
  const std::vector<float> tone = test::sine(9000, 1.0, 48000, {0.5f});
  Result<std::vector<float>> x = to_speech_rate(tone, 48000, 1);
  ASSERT_TRUE(x.has_value()) << x.status().to_string();
  EXPECT_LT(rms(std::span(*x).subspan(2000, 12000)), 1e-4);
}

TEST(ToSpeechRate, CopiesAndAveragesAtSpeechRate) {
  const std::vector<float> mono = {0.5f, -0.25f, 1.0f, 0.0f};
  Result<std::vector<float>> same = to_speech_rate(mono, 16000, 1);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(*same, mono);
  const std::vector<float> stereo = {0.5f, -0.5f, 1.0f, 0.5f, -1.0f, -0.5f};
  Result<std::vector<float>> mean = to_speech_rate(stereo, 16000, 2);
  ASSERT_TRUE(mean.has_value());
  EXPECT_EQ(*mean, (std::vector<float>{0.0f, 0.75f, -0.75f}));
  const std::vector<float> three = {0.3f, 0.6f, 0.9f};
  Result<std::vector<float>> mean3 = to_speech_rate(three, 16000, 3);
  ASSERT_TRUE(mean3.has_value());
  ASSERT_EQ(mean3->size(), 1u);
  EXPECT_NEAR((*mean3)[0], 0.6f, 1e-6);
  // Non-finite samples are silence.
  const std::vector<float> broken = {NAN, INFINITY, 0.5f, 0.5f};
  Result<std::vector<float>> cleaned = to_speech_rate(broken, 16000, 2);
  ASSERT_TRUE(cleaned.has_value());
  EXPECT_EQ(*cleaned, (std::vector<float>{0.0f, 0.5f}));
  Result<std::vector<float>> empty = to_speech_rate({}, 44100, 2);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());
}

TEST(ToSpeechRate, RefusesBadShapes) {
  const std::vector<float> x = {0.1f, 0.2f, 0.3f};
  EXPECT_EQ(to_speech_rate(x, 0, 1).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(to_speech_rate(x, -16000, 1).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(to_speech_rate(x, 16000, 0).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(to_speech_rate(x, 16000, 2).status().code(), StatusCode::invalid_argument);  // 1.5 frames
}

TEST(ToSpeechRate, ResamplesToTheRatiosLength) {
  for (int rate : {8000, 11025, 22050, 24000, 44100, 48000, 96000}) {
    const std::vector<float> x = test::sine(440, 3.0, rate, {0.5f});
    Result<std::vector<float>> y = to_speech_rate(x, rate, 1);
    ASSERT_TRUE(y.has_value()) << rate;
    EXPECT_NEAR(double(y->size()), 48000, 1) << rate;
    EXPECT_NEAR(sine_frequency(*y, 4000, 44000, kSpeechSampleRate), 440, 0.05) << rate;
  }
}

// Rates a damaged header can state: resampled (or refused), never a crash or a hang.
TEST(ToSpeechRate, ExtremeRates) {
  const std::vector<float> x = test::sine(0.1, 1.0, 1000, {0.5f});
  for (int rate : {1, 7, 100, 1'000'000, 2'147'483'647}) {
    Result<std::vector<float>> y = to_speech_rate(x, rate, 1);
    ASSERT_TRUE(y.has_value()) << rate << ": " << y.status().to_string();
    EXPECT_NEAR(double(y->size()), 1000.0 * 16000 / rate, 1 + 1000.0 * 16000 / rate * 1e-3) << rate;
  }
}

// A file whose rate changes part way (a chained Ogg) is resampled per run, end to end.
TEST(ToSpeechRate, StreamedRunsAtDifferentRates) {
  SpeechResampler resampler;
  const std::vector<float> a = test::sine(500, 1.0, 48000, {0.5f, 0.5f});
  const std::vector<float> b = test::sine(500, 1.0, 16000, {0.5f});
  ASSERT_TRUE(resampler.push(std::span(a).first(a.size() / 2), 48000, 2).ok());
  ASSERT_TRUE(resampler.push(std::span(a).subspan(a.size() / 2), 48000, 2).ok());
  ASSERT_TRUE(resampler.push(b, 16000, 1).ok());
  EXPECT_NEAR(resampler.source_seconds(), 2.0, 1e-9);
  Result<std::vector<float>> y = resampler.finish();
  ASSERT_TRUE(y.has_value());
  EXPECT_NEAR(double(y->size()), 32000, 1);
  EXPECT_NEAR(sine_frequency(*y, 2000, 14000, kSpeechSampleRate), 500, 0.05);
  EXPECT_NEAR(sine_frequency(*y, 18000, 30000, kSpeechSampleRate), 500, 0.05);
}

TEST(ToSpeechRate, StreamedLimitCountsSourceSeconds) {
  SpeechResampler resampler(1.0);
  const std::vector<float> half = test::sine(500, 0.5, 44100, {0.5f});
  ASSERT_TRUE(resampler.push(half, 44100, 1).ok());
  ASSERT_TRUE(resampler.push(half, 44100, 1).ok());
  const Status over = resampler.push(half, 44100, 1);
  EXPECT_EQ(over.code(), StatusCode::invalid_argument);
  EXPECT_EQ(over.message(), "is longer than the limit of 1 s");
}

std::vector<uint8_t> pcm16_bytes(const std::vector<int16_t>& samples) {
  std::vector<uint8_t> bytes;
  for (int16_t s : samples) {
    bytes.push_back(uint8_t(uint16_t(s) & 0xff));
    bytes.push_back(uint8_t(uint16_t(s) >> 8));
  }
  return bytes;
}

TEST(Pcm16ToSpeech, SixteenKilohertzIsExact) {
  const std::vector<uint8_t> bytes = pcm16_bytes({0, 1, -1, 16384, -32768, 32767});
  Result<std::vector<float>> x = pcm16_to_speech(bytes, 16000);
  ASSERT_TRUE(x.has_value()) << x.status().to_string();
  EXPECT_EQ(*x, (std::vector<float>{0.0f, 1.0f / 32768, -1.0f / 32768, 0.5f, -1.0f, 32767.0f / 32768}));
  Result<std::vector<float>> empty = pcm16_to_speech({}, 16000);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());
}

TEST(Pcm16ToSpeech, TwentyFourKilohertzIsResampledToTwoThirds) {
  std::vector<int16_t> samples;
  for (float v : test::sine(440, 2.0, 24000, {0.5f})) samples.push_back(int16_t(std::lround(v * 32767)));
  Result<std::vector<float>> x = pcm16_to_speech(pcm16_bytes(samples), 24000);
  ASSERT_TRUE(x.has_value()) << x.status().to_string();
  EXPECT_NEAR(double(x->size()), samples.size() * 2.0 / 3.0, 1);
  EXPECT_NEAR(sine_frequency(*x, 2000, 30000, kSpeechSampleRate), 440, 0.05);
  EXPECT_NEAR(rms(std::span(*x).subspan(2000, 28000)) * std::sqrt(2.0), 0.5, 0.002);
}

// HTTP handler threads decode at once: the same bytes give the same samples on each.
TEST(AudioDecode, ConcurrentDecodesAgree) {
  const test::PcmAudio& source = jfk_source();
  std::vector<std::vector<uint8_t>> files = {file_bytes(jfk_path())};
  for (AudioFormat format : {AudioFormat::mp3, AudioFormat::ogg_vorbis}) {
    Result<std::vector<uint8_t>> bytes =
        test::write_audio(source.interleaved, AudioSpec{format, source.rate, source.channels});
    ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
    files.push_back(std::move(bytes).value());
  }
  files.push_back({'n', 'o', 't', ' ', 'a', 'u', 'd', 'i', 'o'});
  std::vector<Result<Audio>> alone;
  for (const auto& f : files) alone.push_back(decode_audio(f));
  std::vector<std::vector<Result<Audio>>> together(4);
  std::vector<std::thread> threads;
  for (auto& results : together) {
    threads.emplace_back([&files, &results] {
      for (const auto& f : files) results.push_back(decode_audio(f));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& results : together) {
    for (size_t i = 0; i < files.size(); ++i) {
      ASSERT_EQ(results[i].has_value(), alone[i].has_value()) << i;
      if (alone[i].has_value()) {
        EXPECT_EQ(results[i]->samples, alone[i]->samples) << i;
      } else {
        EXPECT_EQ(results[i].status().message(), alone[i].status().message()) << i;
      }
    }
  }
}

TEST(AudioLimits, LengthsWithinTheLimitsDecode) {
  AudioLimits limits;
  limits.max_seconds = 11.5;
  limits.min_seconds = 10.5;
  Result<Audio> audio = decode_audio(file_bytes(jfk_path()), limits);
  ASSERT_TRUE(audio.has_value()) << audio.status().to_string();
  EXPECT_NEAR(audio->seconds(), 11.0, 0.11);
}

}  // namespace
}  // namespace prism::media

// decode_audio and pcm16_to_speech on bad input: every case ends in an invalid_argument
// predicate that says which (or, for a file cut short, the audio it really holds), never a
// crash: empty, random bytes, text, truncated FLAC / MP3 / M4A, a video without audio, each
// limit, odd PCM16, and a few hundred bit-flipped small files of every format.
#include "media/audio.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "test_util/audio_writer.h"
#include "test_util/paths.h"
#include "test_util/video_writer.h"

namespace prism::media {
namespace {

using test::AudioFormat;
using test::AudioSpec;

std::vector<uint8_t> jfk_bytes() {
  Result<std::string> text = read_file(test::testdata_dir() + "/audio/jfk.flac");
  EXPECT_TRUE(text.has_value()) << text.status().to_string();
  if (!text.has_value()) return {};
  return {text->begin(), text->end()};
}

std::vector<uint8_t> write_or_die(std::span<const float> samples, const AudioSpec& spec) {
  Result<std::vector<uint8_t>> bytes = test::write_audio(samples, spec);
  EXPECT_TRUE(bytes.has_value()) << bytes.status().to_string();
  return bytes.has_value() ? std::move(bytes).value() : std::vector<uint8_t>{};
}

// 1.5 s of a 440 Hz sine and its harmonics at 44.1 kHz stereo.
std::vector<float> small_signal(double seconds = 1.5) {
  std::vector<float> x = test::sine(440, seconds, 44100, {0.5f, 0.3f});
  const std::vector<float> h = test::sine(1320, seconds, 44100, {0.1f, 0.2f});
  for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
  return x;
}

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void expect_invalid(const Result<Audio>& a, const std::string& message_part) {
  ASSERT_FALSE(a.has_value()) << "decoded " << a->samples.size() << " samples";
  EXPECT_EQ(a.status().code(), StatusCode::invalid_argument) << a.status().to_string();
  EXPECT_NE(a.status().message().find(message_part), std::string::npos) << a.status().message();
}

TEST(AudioErrors, EmptyRandomAndText) {
  expect_invalid(decode_audio({}), "is empty");
  std::mt19937 rng(3);
  for (size_t size : {1, 2, 7, 100, 4096, 100000, 1000000}) {
    std::vector<uint8_t> bytes(size);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    expect_invalid(decode_audio(bytes), "is not audio that can be decoded");
  }
  expect_invalid(decode_audio(as_bytes("hello, this is a text file and not audio at all\n")),
                 "is not audio that can be decoded");
  std::string long_text;
  for (int i = 0; i < 2000; ++i) long_text += "line " + std::to_string(i) + " of a transcript, not audio\n";
  expect_invalid(decode_audio(as_bytes(long_text)), "is not audio that can be decoded");
  // An image: FFmpeg reads it, but not as audio.
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0\x90wS\xde", 33);
  expect_invalid(decode_audio(as_bytes(png)), "is not audio that can be decoded");
}

// A container's signature followed by garbage: the decoder says so.
TEST(AudioErrors, SignaturesFollowedByGarbage) {
  std::mt19937 rng(5);
  const std::string heads[] = {std::string("RIFF\x24\x00\x01\x00WAVEfmt ", 16),
                               std::string("fLaC\x00\x00\x00\x22", 8),
                               std::string("OggS\x00\x02\x00\x00", 8),
                               std::string("ID3\x04\x00\x00\x00\x00\x00\x00", 10),
                               std::string("\x00\x00\x00\x18"
                                           "ftypM4A \x00\x00\x02\x00isomiso2",
                                           24),
                               std::string("\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01", 13)};
  for (const std::string& head : heads) {
    std::vector<uint8_t> bytes(head.begin(), head.end());
    for (int i = 0; i < 20000; ++i) bytes.push_back(uint8_t(rng()));
    const Result<Audio> a = decode_audio(bytes);
    ASSERT_FALSE(a.has_value()) << head.substr(0, 4) << ": decoded " << a->samples.size() << " samples";
    EXPECT_EQ(a.status().code(), StatusCode::invalid_argument) << a.status().to_string();
    std::printf("%-4s + garbage: %s\n", head.substr(0, 4).c_str(), a.status().message().c_str());
  }
}

// NOTE: a file cut short (a broken upload) or damaged part way, whose header states its
// length, is corrupt: "its audio ends at 2.7 s, but its header states 11.0 s". It is never
// passed on as a shorter recording. Cut inside the header, it is not audio at all.
TEST(AudioErrors, CutShortFilesThatStateTheirLengthAreCorrupt) {
  const std::vector<uint8_t> flac = jfk_bytes();
  for (double fraction : {0.25, 0.5, 0.9}) {
    const Result<Audio> a = decode_audio(std::span(flac).first(size_t(double(flac.size()) * fraction)));
    expect_invalid(a, "is corrupt: its audio ends at ");
    expect_invalid(a, ", but its header states 11.0 s (cut short or damaged)");
  }
  for (size_t size : {4, 20, 42, 100}) {
    const Result<Audio> a = decode_audio(std::span(flac).first(size));
    ASSERT_FALSE(a.has_value()) << size;
    EXPECT_EQ(a.status().code(), StatusCode::invalid_argument) << a.status().to_string();
  }
  const std::vector<float> signal = small_signal(3.0);
  const std::vector<uint8_t> mp3 = write_or_die(signal, AudioSpec{AudioFormat::mp3, 44100, 2});  // LAME header
  expect_invalid(decode_audio(std::span(mp3).first(mp3.size() / 2)), "but its header states 3.0 s");
  expect_invalid(decode_audio(std::span(mp3).first(3)), "is not audio that can be decoded");
  // An mp4 keeps its index at the end: cut, it has none.
  const std::vector<uint8_t> m4a = write_or_die(signal, AudioSpec{AudioFormat::m4a, 44100, 2});
  expect_invalid(decode_audio(std::span(m4a).first(m4a.size() / 2)), "is corrupt");
}

// Streams that do not state their length (a FLAC whose STREAMINFO leaves the sample count 0,
// an MP3 without a LAME header, a MediaRecorder WebM) and WAVs (libsndfile reads their length
// from the file's size): a cut decodes to the audio it holds, which is all there is to know.
// It is the whole file's audio up to the cut.
TEST(AudioErrors, CutShortStreamsGiveTheirPrefix) {
  std::vector<uint8_t> flac = jfk_bytes();
  ASSERT_GT(flac.size(), 26u);
  flac[21] &= 0xf0;  // STREAMINFO's 36-bit total sample count: byte 21's low nibble, bytes 22-25
  std::fill(flac.begin() + 22, flac.begin() + 26, uint8_t(0));
  const Result<Audio> whole_flac = decode_audio(flac);
  ASSERT_TRUE(whole_flac.has_value()) << whole_flac.status().to_string();
  EXPECT_NEAR(whole_flac->seconds(), 11.0, 0.11);

  const std::vector<float> signal = small_signal(3.0);
  AudioSpec mp3_stream{AudioFormat::mp3, 44100, 2};
  mp3_stream.seekable = false;
  AudioSpec webm_stream{AudioFormat::webm, 44100, 2};
  webm_stream.seekable = false;
  const std::vector<uint8_t> mp3 = write_or_die(signal, mp3_stream);
  const std::vector<uint8_t> webm = write_or_die(signal, webm_stream);
  const std::vector<uint8_t> wav = write_or_die(signal, AudioSpec{AudioFormat::wav_pcm16, 44100, 2});
  struct Case {
    std::string name;
    const std::vector<uint8_t>& bytes;
    double seconds;
  };
  for (const Case& c :
       {Case{"flac", flac, 11.0}, Case{"mp3", mp3, 3.0}, Case{"webm", webm, 3.0}, Case{"wav", wav, 3.0}}) {
    const Result<Audio> whole = decode_audio(c.bytes);
    ASSERT_TRUE(whole.has_value()) << c.name << ": " << whole.status().to_string();
    for (double fraction : {0.3, 0.5, 0.77}) {
      const Result<Audio> a = decode_audio(std::span(c.bytes).first(size_t(double(c.bytes.size()) * fraction)));
      ASSERT_TRUE(a.has_value()) << c.name << " " << fraction << ": " << a.status().to_string();
      // FLAC's bit rate follows the speech; the others' are constant.
      EXPECT_NEAR(a->seconds(), c.seconds * fraction, c.name == "flac" ? 1.5 : 0.1) << c.name << " " << fraction;
      const size_t n = a->samples.size() - 1000;  // the last frame and the filter's tail differ
      double max_diff = 0;
      for (size_t i = 0; i < n; ++i) max_diff = std::max(max_diff, double(std::abs(a->samples[i] - whole->samples[i])));
      EXPECT_LT(max_diff, 1e-6) << c.name << " " << fraction;
    }
  }
}

TEST(AudioErrors, VideoWithoutAudio) {
  Result<std::vector<uint8_t>> video = test::write_video(test::VideoSpec{});
  ASSERT_TRUE(video.has_value()) << video.status().to_string();
  expect_invalid(decode_audio(*video), "has no audio stream");
}

// The other way: audio inside a video container (Matroska, PCM) decodes.
TEST(AudioErrors, AudioOnlyMatroskaDecodes) {
  test::VideoSpec spec;
  spec.container = "matroska";
  spec.codec = "pcm_s16le";
  spec.audio_only = true;
  Result<std::vector<uint8_t>> bytes = test::write_video(spec);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
  const Result<Audio> a = decode_audio(*bytes);
  ASSERT_TRUE(a.has_value()) << a.status().to_string();
  EXPECT_EQ(a->format, "matroska");
  EXPECT_NEAR(a->seconds(), 4.0, 0.01);
  for (float v : a->samples) ASSERT_EQ(v, 0.0f);  // the writer's silence
}

TEST(AudioErrors, Limits) {
  const std::vector<uint8_t> flac = jfk_bytes();
  AudioLimits limits;
  limits.max_seconds = 5;
  expect_invalid(decode_audio(flac, limits), "is 11.0 s long, more than the limit of 5 s");
  limits = {};
  limits.min_seconds = 12;
  expect_invalid(decode_audio(flac, limits), "is 11.0 s long, less than the minimum of 12 s");
  limits = {};
  limits.max_bytes = 1000;
  expect_invalid(decode_audio(flac, limits),
                 "is " + std::to_string(flac.size()) + " bytes, more than the limit of 1000 bytes");

  // FFmpeg with a stated length (the LAME header): refused before decoding.
  const std::vector<float> signal = small_signal(3.0);
  limits = {};
  limits.max_seconds = 2;
  expect_invalid(decode_audio(write_or_die(signal, AudioSpec{AudioFormat::mp3, 44100, 2}), limits),
                 "is 3.0 s long, more than the limit of 2 s");
  expect_invalid(decode_audio(write_or_die(signal, AudioSpec{AudioFormat::m4a, 44100, 2}), limits),
                 "is 3.0 s long, more than the limit of 2 s");
  // A WebM stream states no length: refused while decoding, once past the limit.
  AudioSpec stream{AudioFormat::webm, 44100, 2};
  stream.seekable = false;
  expect_invalid(decode_audio(write_or_die(signal, stream), limits), "is longer than the limit of 2 s");
  // A WAV states its length.
  expect_invalid(decode_audio(write_or_die(signal, AudioSpec{AudioFormat::wav_pcm16, 44100, 2}), limits),
                 "is 3.0 s long, more than the limit of 2 s");
}

TEST(AudioErrors, NoSamples) {
  const std::vector<uint8_t> wav = write_or_die({}, AudioSpec{AudioFormat::wav_pcm16, 16000, 1});
  expect_invalid(decode_audio(wav), "is empty");
}

TEST(AudioErrors, OddPcm16AndBadRates) {
  const std::vector<uint8_t> three = {1, 2, 3};
  const Result<std::vector<float>> odd = pcm16_to_speech(three, 16000);
  ASSERT_FALSE(odd.has_value());
  EXPECT_EQ(odd.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(odd.status().message().find("odd number of bytes (3)"), std::string::npos) << odd.status().message();
  const std::vector<uint8_t> four = {1, 2, 3, 4};
  EXPECT_EQ(pcm16_to_speech(four, 0).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(pcm16_to_speech(four, -24000).status().code(), StatusCode::invalid_argument);
}

// Bit flips and cuts in small files of every format: each decode is refused with an
// invalid_argument or gives finite samples of a plausible length; none crashes or hangs.
TEST(AudioErrors, BitFlipFuzz) {
  const std::vector<float> signal = small_signal(1.5);
  const std::vector<float> mono16k = test::sine(440, 1.5, 16000, {0.5f});
  struct Seed {
    std::string name;
    std::vector<uint8_t> bytes;
  };
  std::vector<Seed> seeds;
  for (AudioFormat format : {AudioFormat::wav_pcm16, AudioFormat::flac, AudioFormat::ogg_vorbis, AudioFormat::mp3,
                             AudioFormat::m4a, AudioFormat::webm}) {
    seeds.push_back({test::audio_format_name(format), write_or_die(signal, AudioSpec{format, 44100, 2})});
  }
  seeds.push_back({"ogg_opus", write_or_die(mono16k, AudioSpec{AudioFormat::ogg_opus, 16000, 1})});
  std::mt19937 rng(17);
  int num_decoded = 0, num_refused = 0;
  for (const Seed& seed : seeds) {
    ASSERT_FALSE(seed.bytes.empty()) << seed.name;
    for (int variant = 0; variant < 50; ++variant) {
      std::vector<uint8_t> bytes = seed.bytes;
      if (variant % 10 == 9) {  // a cut
        bytes.resize(rng() % bytes.size() + 1);
      } else {  // 1 to 8 bit flips, anywhere (headers included)
        const int flips = 1 + int(rng() % 8);
        for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] ^= uint8_t(1u << (rng() % 8));
      }
      const Result<Audio> a = decode_audio(bytes);
      if (!a.has_value()) {
        ++num_refused;
        ASSERT_EQ(a.status().code(), StatusCode::invalid_argument)
            << seed.name << " " << variant << ": " << a.status().to_string();
        continue;
      }
      ++num_decoded;
      // A flipped header can state another rate or channel count; a length of many minutes
      // from a 1.5 s file would mean a runaway decoder.
      ASSERT_LT(a->seconds(), 60.0) << seed.name << " " << variant;
      for (float v : a->samples) ASSERT_TRUE(std::isfinite(v)) << seed.name << " " << variant;
    }
  }
  std::printf("bit-flip fuzz: %d decoded, %d refused\n", num_decoded, num_refused);
  EXPECT_GT(num_decoded, 0);
  EXPECT_GT(num_refused, 0);
}

}  // namespace
}  // namespace prism::media

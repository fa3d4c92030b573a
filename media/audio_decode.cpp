// media/audio_decode.cpp: decode_audio, to_speech_rate and pcm16_to_speech (media/audio.h).
// Picks the decoder from the bytes' signature — libsndfile for WAV, FLAC and Ogg, FFmpeg for
// everything else and for what libsndfile cannot open — and applies the limits. Never
// throws; bad input is an invalid_argument predicate about "the file".
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "media/audio.h"
#include "media/audio_decoders.h"
#include "media/audio_resample.h"

namespace prism::media {
namespace {

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

bool starts_with(std::span<const uint8_t> bytes, size_t offset, const char* magic) {
  const size_t n = std::strlen(magic);
  return bytes.size() >= offset + n && std::memcmp(bytes.data() + offset, magic, n) == 0;
}

// WAV (RIFF or RF64), FLAC and Ogg: libsndfile's containers. Any other signature (MP3, MP4,
// WebM ...) goes straight to FFmpeg; libsndfile's own other formats are not used.
bool is_sndfile_container(std::span<const uint8_t> bytes) {
  return ((starts_with(bytes, 0, "RIFF") || starts_with(bytes, 0, "RF64")) && starts_with(bytes, 8, "WAVE")) ||
         starts_with(bytes, 0, "fLaC") || starts_with(bytes, 0, "OggS");
}

// Audio may end this much short of its stated length (headers round; a decoder drops a
// damaged packet): max(seconds, share of the length).
constexpr double kShortfallSeconds = 0.5;
constexpr double kShortfallShare = 0.01;

}  // namespace

std::string limit_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

Status check_stated_seconds(double seconds, const AudioLimits& limits) {
  if (seconds > limits.max_seconds) {
    return invalid_argument("is " + seconds_text(seconds) + " s long, more than the limit of " +
                            limit_text(limits.max_seconds) + " s");
  }
  return Status();
}

bool ends_short(double decoded_seconds, double stated_seconds) {
  return stated_seconds > 0 &&
         decoded_seconds < stated_seconds - std::max(kShortfallSeconds, kShortfallShare * stated_seconds);
}

Status check_complete(double decoded_seconds, double stated_seconds) {
  if (!ends_short(decoded_seconds, stated_seconds)) return Status();
  return invalid_argument("is corrupt: its audio ends at " + seconds_text(decoded_seconds) +
                          " s, but its header states " + seconds_text(stated_seconds) + " s (cut short or damaged)");
}

Result<Audio> decode_audio(std::span<const uint8_t> bytes, const AudioLimits& limits) {
  if (bytes.empty()) return invalid_argument("is empty");
  if (int64_t(bytes.size()) > limits.max_bytes) {
    return invalid_argument("is " + std::to_string(bytes.size()) + " bytes, more than the limit of " +
                            std::to_string(limits.max_bytes) + " bytes");
  }
  std::optional<Audio> audio;
  if (is_sndfile_container(bytes)) {
    // NOTE: Ogg files are read by FFmpeg's demuxer first, for two reasons. libsndfile's
    // length of an Ogg file is as far as its own scan got (it stops at a damaged page, as its
    // decoder does), so its audio can look whole: the length the file states is its last
    // page's granule position, which FFmpeg reads. And libsndfile 1.2 leaks libvorbis's
    // state when a Vorbis header fails to parse: a file FFmpeg cannot open is never given to
    // it. Audio short of the stated length goes to FFmpeg, which says what is wrong.
    const bool ogg = starts_with(bytes, 0, "OggS");
    double ogg_seconds = 0;
    if (ogg) {
      PRISM_ASSIGN_OR_RETURN(ogg_seconds, ffmpeg_stated_seconds(bytes));
    }
    PRISM_ASSIGN_OR_RETURN(audio, decode_with_sndfile(bytes, limits));
    if (audio && ogg && ends_short(audio->seconds(), ogg_seconds)) audio.reset();
  }
  if (!audio) {
    PRISM_ASSIGN_OR_RETURN(audio, decode_with_ffmpeg(bytes, limits));
  }
  if (audio->samples.empty()) return invalid_argument("is empty (it holds no audio samples)");
  if (audio->seconds() < limits.min_seconds) {
    return invalid_argument("is " + seconds_text(audio->seconds()) + " s long, less than the minimum of " +
                            limit_text(limits.min_seconds) + " s");
  }
  return std::move(*audio);
}

Result<std::vector<float>> to_speech_rate(std::span<const float> interleaved, int rate, int channels) {
  SpeechResampler resampler;
  PRISM_RETURN_IF_ERROR(resampler.push(interleaved, rate, channels));
  return resampler.finish();
}

Result<std::vector<float>> pcm16_to_speech(std::span<const uint8_t> bytes, int rate) {
  if (bytes.size() % 2 != 0) {
    return invalid_argument("has an odd number of bytes (" + std::to_string(bytes.size()) +
                            "), which is not whole PCM16 samples");
  }
  if (rate <= 0) return invalid_argument("audio sample rate must be positive, got " + std::to_string(rate));
  std::vector<float> samples(bytes.size() / 2);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto value = int16_t(uint16_t(bytes[2 * i]) | uint16_t(bytes[2 * i + 1]) << 8);  // little-endian
    samples[i] = float(value) / 32768.0f;
  }
  if (rate == kSpeechSampleRate) return samples;
  return to_speech_rate(samples, rate, 1);
}

}  // namespace prism::media

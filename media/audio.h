// media/audio.h: speech audio in, 16 kHz mono float out — what every ASR path (files over
// HTTP, the CLI, live PCM16 frames) feeds the VAD and the log-mel front end. Files are decoded
// from memory: WAV, FLAC and OGG/Opus/Vorbis through libsndfile; MP3, M4A/AAC, WebM and
// anything else FFmpeg demuxes through the FFmpeg libraries. Channels are averaged to mono
// and the rate converted with soxr (its high-quality preset).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace prism::media {

inline constexpr int kSpeechSampleRate = 16000;

struct AudioLimits {
  int64_t max_bytes = 256ll << 20;  // encoded file size
  double max_seconds = 3 * 3600;    // longer audio is refused (before decoding it all)
  double min_seconds = 0.0;         // shorter is refused; empty audio (no samples) always is
};

struct Audio {
  std::vector<float> samples;  // mono, kSpeechSampleRate, nominally in [-1, 1]
  // The source as it was, for logs and verbose_json: its container/codec, rate and channels.
  std::string format;          // "flac", "wav", "mp3", "ogg", "mp4", "webm", ...
  int source_rate = 0;
  int source_channels = 0;
  double seconds() const { return double(samples.size()) / kSpeechSampleRate; }
};

// invalid_argument with a predicate message for bad input, naming which: "is empty",
// "is not audio that can be decoded (...)" (unsupported or unknown container), "is corrupt:
// ..." (the container cannot be read, nothing decodes, more than a tenth of the packets fail,
// or "its audio ends at 2.7 s, but its header states 11.0 s (cut short or damaged)"), "is
// 4000.0 s long, more than the limit of 3600 s" (a stated length, before decoding), "is
// longer than the limit of 3600 s" (no stated length: while decoding), "is 0.3 s long, less
// than the minimum of 1 s", "has no audio stream", "is 300000000 bytes, more than the limit of
// 268435456 bytes". Never crashes on any input.
// Damage: a damaged packet is skipped (as FFmpeg's tools do). A file cut short whose header
// states its length is corrupt; one that states none decodes to the audio it holds: a WebM
// or MP3 stream, and any WAV (libsndfile takes a WAV's length from the file's size: streamed
// WAVs leave placeholders in the header).
// Thread-safe; one decoder thread (no pool of its own).
Result<Audio> decode_audio(std::span<const uint8_t> bytes, const AudioLimits& limits = {});

// Interleaved frames of `channels` channels at `rate` → mono at kSpeechSampleRate (mean of the
// channels, then soxr). rate 16000 and 1 channel copies. Non-finite samples count as 0.
// invalid_argument for rate <= 0, channels <= 0, or a size that is not whole frames.
Result<std::vector<float>> to_speech_rate(std::span<const float> interleaved, int rate, int channels);

// Little-endian PCM16 mono (the Realtime API's audio/pcm) → floats in [-1, 1) at
// kSpeechSampleRate. rate: 16000 or 24000 (or any positive rate: resampled). An odd byte count
// is invalid_argument.
Result<std::vector<float>> pcm16_to_speech(std::span<const uint8_t> bytes, int rate);

}  // namespace prism::media

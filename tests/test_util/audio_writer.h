// Test audio written from samples, in memory: WAV, FLAC and Ogg through libsndfile's virtual
// I/O, MP3 (libmp3lame), M4A (FFmpeg's AAC) and WebM (libopus) through the FFmpeg encoders
// and muxers; plus the ground truth a test compares decoders with (a file read by libsndfile)
// and test signals.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace prism::test {

enum class AudioFormat {
  wav_pcm16,
  wav_pcm24,
  wav_float,
  flac,        // 24-bit
  ogg_vorbis,  // libsndfile, quality 0.9
  ogg_opus,    // libsndfile; its Opus needs 8, 12, 16, 24 or 48 kHz
  mp3,         // libmp3lame, 192 kb/s, with the LAME header (length and encoder delay)
  m4a,         // FFmpeg's AAC encoder, 192 kb/s, in an mp4 (ipod) container
  webm,        // libopus, 128 kb/s, in WebM; Opus runs at 48 kHz, so other rates are resampled
};

std::string audio_format_name(AudioFormat format);

struct AudioSpec {
  AudioFormat format = AudioFormat::wav_pcm16;
  int rate = 16000;
  int channels = 1;
  // FFmpeg formats: false writes a stream, as a browser's MediaRecorder does (a WebM without
  // a duration or an index).
  bool seekable = true;
};

// interleaved: spec.channels samples per frame, nominally in [-1, 1].
Result<std::vector<uint8_t>> write_audio(std::span<const float> interleaved, const AudioSpec& spec);

// A file's samples as libsndfile reads them (floats in [-1, 1), interleaved).
struct PcmAudio {
  std::vector<float> interleaved;
  int rate = 0;
  int channels = 0;
  int64_t num_frames() const { return channels ? int64_t(interleaved.size()) / channels : 0; }
};
Result<PcmAudio> read_audio_file(const std::string& path);

// `seconds` of a sine of `hz` at `rate`, channel c scaled by amplitudes[c] (interleaved).
std::vector<float> sine(double hz, double seconds, int rate, const std::vector<float>& amplitudes);

}  // namespace prism::test

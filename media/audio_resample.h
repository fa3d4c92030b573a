// media/audio_resample.h: SpeechResampler, the one path from decoded audio to speech samples
// (media/audio.h): interleaved frames at any rate and channel count in, mono at
// kSpeechSampleRate out — the mean of the channels, then soxr at its high-quality preset.
// Streamed, so that a long file is never held whole at its source rate, and it counts the
// source's seconds against a limit as they arrive (a file that does not state its length is
// refused as soon as it passes the limit). Internal to media/; one per decode, one thread.
#pragma once

#include <limits>
#include <span>
#include <vector>

#include "base/status.h"

struct soxr;

namespace prism::media {

class SpeechResampler {
 public:
  // max_seconds: the source audio allowed, in seconds at its own rate.
  explicit SpeechResampler(double max_seconds = std::numeric_limits<double>::infinity());
  ~SpeechResampler();
  SpeechResampler(const SpeechResampler&) = delete;
  SpeechResampler& operator=(const SpeechResampler&) = delete;

  // Appends frames of `channels` interleaved samples at `rate` (a whole number of frames).
  // A rate that differs from the previous push's (a chained file) ends the resampler's run
  // at the old rate, tail included, and starts one at the new rate. Non-finite samples
  // count as silence. invalid_argument "is longer than the limit of N s" past max_seconds.
  Status push(std::span<const float> interleaved, int rate, int channels);
  // Flushes the resampler's tail and hands over every sample (the resampler is then empty).
  Result<std::vector<float>> finish();

  double source_seconds() const { return source_seconds_; }

 private:
  Status start(int rate);
  Status flush();
  Status resample(const float* in, size_t num_in);

  double max_seconds_;
  double source_seconds_ = 0;
  int rate_ = 0;             // the current run's rate; 0 before the first push
  soxr* soxr_ = nullptr;     // owned; null when rate_ is kSpeechSampleRate (copied as is)
  std::vector<float> mono_;  // scratch: one push mixed down
  std::vector<float> out_;   // mono at kSpeechSampleRate
};

}  // namespace prism::media

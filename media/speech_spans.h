// media/speech_spans.h: voice activity as spans of samples. Speech probabilities per window
// (from a VAD network such as Silero, or the built-in energy detector) are turned into speech
// spans with Silero's rules (its `get_speech_timestamps`): speech starts when a window's
// probability reaches `threshold`, ends after `min_silence_ms` below `threshold - 0.15`;
// spans shorter than `min_speech_ms` are dropped, spans longer than `max_speech_s` are split
// (at the last long-enough silence when there is one, else hard), and every span is widened
// by `speech_pad_ms` on both sides (without overlapping its neighbours).
// StreamingEndpointer applies the same hysteresis one window at a time, for live audio.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace prism::media {

inline constexpr int kVadWindow = 512;  // samples per VAD window at 16 kHz (32 ms)

struct VadParams {
  float threshold = 0.5f;
  float neg_threshold = -1.0f;  // < 0: threshold - 0.15 (Silero's default)
  int min_speech_ms = 250;
  int min_silence_ms = 100;
  int speech_pad_ms = 30;
  double max_speech_s = std::numeric_limits<double>::infinity();
};

struct SpeechSpan {
  int64_t start = 0;  // samples, inclusive
  int64_t end = 0;    // samples, exclusive
};

// probs[i]: speech probability of window i = samples [i * kVadWindow, (i + 1) * kVadWindow).
// total_samples: the audio's length (spans are clipped to it). Spans ascending, disjoint.
std::vector<SpeechSpan> speech_spans(std::span<const float> probs, int64_t total_samples, const VadParams& params);

// The built-in detector that needs no model file: per 512-sample window, a speech
// probability from its energy against an adaptive noise floor and its spectral shape (voiced
// speech is loud against the floor and not flat). push() carries the floor from window to
// window, so one EnergyVad per stream; energy_vad_probabilities runs one over a recording.
class EnergyVad {
 public:
  float push(std::span<const float> window);  // kVadWindow samples at 16 kHz
 private:
  double noise_floor_ = -1.0;  // < 0: not yet estimated
  int64_t windows_ = 0;
};
std::vector<float> energy_vad_probabilities(std::span<const float> samples16k);

// Live endpointing over a stream of window probabilities (the same hysteresis as speech_spans,
// min_speech_ms / min_silence_ms in windows). push() returns an event when one happens.
class StreamingEndpointer {
 public:
  enum class Event : uint8_t { speech_started, speech_stopped };
  explicit StreamingEndpointer(const VadParams& params);
  // prob of the next window; its first sample is window_index * kVadWindow of the stream.
  // speech_started reports the sample where speech began (padded back by speech_pad_ms);
  // speech_stopped the sample where it ended (padded forward).
  struct Change {
    Event event;
    int64_t sample;
  };
  std::optional<Change> push(float prob);
  bool in_speech() const { return in_speech_; }
  int64_t windows() const { return windows_; }

 private:
  VadParams params_;
  bool in_speech_ = false;
  int64_t windows_ = 0;
  int64_t candidate_start_ = -1;   // window where probability first crossed threshold
  int64_t silence_start_ = -1;     // window where the current silence began (while in speech)
};

}  // namespace prism::media

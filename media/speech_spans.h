// media/speech_spans.h: voice activity as spans of samples. Speech probabilities per window
// (from a VAD network such as Silero, or the built-in energy detector) are turned into speech
// spans with Silero's rules (its `get_speech_timestamps`): speech starts when a window's
// probability reaches `threshold`, ends after `min_silence_ms` below `threshold - 0.15`;
// spans shorter than `min_speech_ms` are dropped, spans longer than `max_speech_s` are split
// (at the last pause longer than 98 ms when there is one, else hard), and every span is widened
// by `speech_pad_ms` on both sides (without overlapping its neighbours).
// StreamingEndpointer applies the same hysteresis one window at a time, for live audio.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace prism::media {

inline constexpr int kVadWindow = 512;  // samples per VAD window at 16 kHz (32 ms)

struct VadParams {
  float threshold = 0.5f;
  float neg_threshold = -1.0f;  // < 0: max(threshold - 0.15, 0.01) (Silero's default)
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
// probability from its level against an adaptive noise floor and its spectral shape (voiced
// speech stands well above the floor and is not flat; stationary noise is at the floor and
// white noise is flat). push() carries the floor from window to window, so one EnergyVad per
// stream; energy_vad_probabilities runs one over a recording (windows as speech_spans counts
// them, the last one zero-padded).
class EnergyVad {
 public:
  float push(std::span<const float> window);  // kVadWindow samples at 16 kHz (others: any length > 0)

 private:
  static constexpr int kFloorWindows = 47;  // the floor is a low level of the last 1.5 s
  std::array<float, kFloorWindows> recent_db_{};  // levels of recent windows with signal (ring)
  int recent_count_ = 0;                          // valid entries of recent_db_
  int64_t windows_ = 0;                           // windows with signal pushed so far
};
std::vector<float> energy_vad_probabilities(std::span<const float> samples16k);

// Live endpointing over a stream of window probabilities: the same hysteresis as speech_spans
// (without its max_speech_s split), one window at a time. push() returns an event when one
// happens. The started/stopped samples equal speech_spans' padded spans over the same
// probabilities whenever the gaps between spans are at least 2 * speech_pad_ms (always, when
// min_silence_ms + 32 >= 2 * speech_pad_ms, as with the defaults).
class StreamingEndpointer {
 public:
  enum class Event : uint8_t { speech_started, speech_stopped };
  explicit StreamingEndpointer(const VadParams& params);
  // speech_started: the sample where speech began, padded back by speech_pad_ms (not before 0
  // nor before the previous stop); reported once the span is certain to outlast
  // min_speech_ms. speech_stopped: where it ended, padded forward by speech_pad_ms; reported
  // on the window where the silence reaches min_silence_ms.
  struct Change {
    Event event;
    int64_t sample;
  };
  // prob of the next window; its first sample is window_index * kVadWindow of the stream.
  std::optional<Change> push(float prob);
  // The stream ended after total_samples (<= windows() * kVadWindow): closes a span still
  // open as speech_spans closes the last one (at total_samples, unpadded), announcing it
  // first if it was not yet. Zero, one or two changes; the endpointer is then idle.
  std::vector<Change> finish(int64_t total_samples);
  bool in_speech() const { return in_speech_; }  // between speech_started and speech_stopped
  int64_t windows() const { return windows_; }

 private:
  std::optional<Change> announce_if_certain(int64_t window);
  std::optional<Change> close(int64_t end, bool pad = true);
  int64_t padded_start(int64_t start) const;

  VadParams params_;
  bool in_speech_ = false;          // speech_started reported, speech_stopped not yet
  int64_t windows_ = 0;
  int64_t candidate_start_ = -1;    // window where probability crossed threshold (-1: not in a span)
  int64_t silence_start_ = -1;      // window where the current silence began (while in a span)
  int64_t last_stop_sample_ = 0;    // the last speech_stopped sample
};

}  // namespace prism::media

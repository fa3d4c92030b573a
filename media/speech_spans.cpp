// speech_spans and StreamingEndpointer: window probabilities → speech spans with Silero's
// rules (silero-vad's get_speech_timestamps; its max-speech split at the last silence longer
// than 98 ms, the `use_max_poss_sil_at_max_speech=False` variant). Pure functions of the
// probabilities: no audio, no model, no clock.
#include "media/speech_spans.h"

#include <algorithm>
#include <cmath>

namespace prism::media {

namespace {

constexpr int64_t kSamplesPerMs = 16;  // 16 kHz
// A silence must last longer than this to be a place where an over-long span is split.
constexpr int64_t kMinSilenceAtMaxSpeechSamples = 98 * kSamplesPerMs;

float negative_threshold(const VadParams& p) {
  return p.neg_threshold >= 0 ? p.neg_threshold : std::max(p.threshold - 0.15f, 0.01f);
}

// Silero's padding: the first span starts speech_pad earlier (not before 0), the last ends
// speech_pad later (not past the audio); between two spans closer than 2 * speech_pad the
// gap is split in halves, so padded spans never overlap.
void pad_spans(std::vector<SpeechSpan>& spans, int64_t total_samples, int64_t pad) {
  for (size_t i = 0; i < spans.size(); ++i) {
    SpeechSpan& s = spans[i];
    if (i == 0) s.start = std::max<int64_t>(0, s.start - pad);
    if (i + 1 < spans.size()) {
      SpeechSpan& next = spans[i + 1];
      const int64_t gap = next.start - s.end;
      if (gap < 2 * pad) {
        // NOTE: Python's floor division; gap is >= 0 here (spans are disjoint and ordered).
        s.end += gap / 2;
        next.start = std::max<int64_t>(0, next.start - gap / 2);
      } else {
        s.end = std::min(total_samples, s.end + pad);
        next.start = std::max<int64_t>(0, next.start - pad);
      }
    } else {
      s.end = std::min(total_samples, s.end + pad);
    }
  }
}

}  // namespace

std::vector<SpeechSpan> speech_spans(std::span<const float> probs, int64_t total_samples, const VadParams& params) {
  std::vector<SpeechSpan> spans;
  if (total_samples <= 0) return spans;
  const float threshold = params.threshold, neg_threshold = negative_threshold(params);
  const int64_t min_speech = int64_t(params.min_speech_ms) * kSamplesPerMs;
  const int64_t min_silence = int64_t(params.min_silence_ms) * kSamplesPerMs;
  const int64_t pad = int64_t(params.speech_pad_ms) * kSamplesPerMs;
  // A span is split once it runs longer than this (Silero keeps room for a window and pads).
  const double max_speech = params.max_speech_s * 16000.0 - kVadWindow - 2.0 * double(pad);

  // NOTE: Silero's state machine, sample positions of window starts. `triggered`: inside a
  // span that began at `start`. `temp_end`: where the current silence (below neg_threshold)
  // began, 0 when none (a silence cannot begin at sample 0 inside a span). `possible_ends`:
  // silences longer than 98 ms inside the span that speech came back from (start, length).
  bool triggered = false;
  int64_t start = 0, temp_end = 0;
  std::vector<std::pair<int64_t, int64_t>> possible_ends;
  const int64_t windows = std::min<int64_t>(int64_t(probs.size()), (total_samples + kVadWindow - 1) / kVadWindow);
  for (int64_t i = 0; i < windows; ++i) {
    const float prob = probs[size_t(i)];
    const int64_t cur = i * kVadWindow;
    if (prob >= threshold && temp_end != 0) {  // speech is back: the silence was a pause
      if (cur - temp_end > kMinSilenceAtMaxSpeechSamples) possible_ends.emplace_back(temp_end, cur - temp_end);
      temp_end = 0;
    }
    if (prob >= threshold && !triggered) {
      triggered = true;
      start = cur;
      continue;
    }
    if (triggered && double(cur - start) > max_speech) {
      if (!possible_ends.empty()) {
        // Split at the last long pause: this span ends where it began, the next starts where
        // speech came back.
        const auto [pause_start, pause_length] = possible_ends.back();
        spans.push_back({start, pause_start});
        start = pause_start + pause_length;
        possible_ends.clear();
        temp_end = 0;
      } else {
        spans.push_back({start, cur});  // no pause to split at: cut here
        triggered = false;
        temp_end = 0;
        possible_ends.clear();
        continue;
      }
    }
    if (prob < neg_threshold && triggered) {
      if (temp_end == 0) temp_end = cur;
      if (cur - temp_end < min_silence) continue;
      if (temp_end - start > min_speech) spans.push_back({start, temp_end});
      triggered = false;
      temp_end = 0;
      possible_ends.clear();
    }
  }
  if (triggered && total_samples - start > min_speech) spans.push_back({start, total_samples});
  for (SpeechSpan& s : spans) s.end = std::min(s.end, total_samples);
  pad_spans(spans, total_samples, pad);
  return spans;
}

// ---- StreamingEndpointer ---------------------------------------------------------------

// NOTE: the same state machine as speech_spans without the max-speech split. A span is
// announced (speech_started) as soon as it is certain to outlast min_speech_ms: it can end no
// earlier than where the current silence began, or else than the end of this window. It is
// closed (speech_stopped) on the window where its silence reaches min_silence_ms, as
// speech_spans closes it; a span closed before it was announced was too short and is dropped,
// as speech_spans drops it. The samples equal speech_spans' padded spans whenever every gap
// between spans is at least 2 * speech_pad_ms (always so when min_silence_ms + 32 ms >=
// 2 * speech_pad_ms, as with the defaults); otherwise a start is never put before the
// previous stop, where speech_spans would split the gap in halves.

StreamingEndpointer::StreamingEndpointer(const VadParams& params) : params_(params) {}

std::optional<StreamingEndpointer::Change> StreamingEndpointer::push(float prob) {
  const int64_t window = windows_++;
  const bool triggered = candidate_start_ >= 0;
  if (prob >= params_.threshold && silence_start_ >= 0) silence_start_ = -1;
  if (prob >= params_.threshold && !triggered) {
    candidate_start_ = window;
    return announce_if_certain(window);
  }
  if (prob < negative_threshold(params_) && triggered) {
    if (silence_start_ < 0) silence_start_ = window;
    const int64_t min_silence = int64_t(params_.min_silence_ms) * kSamplesPerMs;
    if ((window - silence_start_) * kVadWindow >= min_silence) return close(silence_start_ * kVadWindow);
  }
  return announce_if_certain(window);
}

std::vector<StreamingEndpointer::Change> StreamingEndpointer::finish(int64_t total_samples) {
  std::vector<Change> changes;
  if (candidate_start_ < 0) return changes;
  // speech_spans keeps a span still open at the end of the audio if it is long enough,
  // counting a trailing short silence as speech.
  const int64_t start = candidate_start_ * kVadWindow;
  const int64_t min_speech = int64_t(params_.min_speech_ms) * kSamplesPerMs;
  if (!in_speech_ && total_samples - start > min_speech) {
    in_speech_ = true;
    changes.push_back({Event::speech_started, padded_start(start)});
  }
  if (auto stop = close(total_samples, /*pad=*/false)) changes.push_back(*stop);
  return changes;
}

int64_t StreamingEndpointer::padded_start(int64_t start) const {
  const int64_t pad = int64_t(params_.speech_pad_ms) * kSamplesPerMs;
  return std::max({int64_t(0), start - pad, last_stop_sample_});
}

std::optional<StreamingEndpointer::Change> StreamingEndpointer::announce_if_certain(int64_t window) {
  if (in_speech_ || candidate_start_ < 0) return std::nullopt;
  const int64_t start = candidate_start_ * kVadWindow;
  const int64_t earliest_end = silence_start_ >= 0 ? silence_start_ * kVadWindow : (window + 1) * kVadWindow;
  if (earliest_end - start <= int64_t(params_.min_speech_ms) * kSamplesPerMs) return std::nullopt;
  in_speech_ = true;
  return Change{Event::speech_started, padded_start(start)};
}

std::optional<StreamingEndpointer::Change> StreamingEndpointer::close(int64_t end, bool pad) {
  const bool announced = in_speech_;
  candidate_start_ = -1;
  silence_start_ = -1;
  in_speech_ = false;
  if (!announced) return std::nullopt;
  last_stop_sample_ = end + (pad ? int64_t(params_.speech_pad_ms) * kSamplesPerMs : 0);
  return Change{Event::speech_stopped, last_stop_sample_};
}

}  // namespace prism::media

// engines/transcribe/live.h: live transcription of many audio streams at once. Each stream
// appends 16 kHz samples as they arrive; one scheduler thread per deployment wakes every
// live_tick_ms and, for all streams together, scores the new VAD windows (one batch),
// advances each stream's endpointer (media::StreamingEndpointer: speech started / stopped)
// and queues the decodes that are due — a partial re-decoded over the utterance's last
// live_window_seconds whenever live_partial_ms of new speech arrived and the stream has no
// decode in flight, and a final over the whole utterance when speech stops, on commit(), or
// at live_max_utterance_seconds (sherpa-onnx's 20 s). Decodes of every stream go to the
// engine together and are batched there. Partials encode only their window (whisper.cpp's
// reduced audio_ctx: frames = window / 160, rounded up to even), finals the whole utterance.
// A stream whose client stalls (no audio for live_stall_seconds while open) or sends
// garbage is closed with an error event; the others never notice.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "engines/transcribe/transcription.h"

namespace prism::engines::transcribe {

struct LiveSettings {
  int tick_ms = 10;                  // knob live_tick_ms
  int partial_ms = 200;              // knob live_partial_ms: new speech between partials
  double window_seconds = 5.0;       // knob live_window_seconds: partials decode this much at most
  double max_utterance_seconds = 20; // knob live_max_utterance_seconds (≤ 30)
  double stall_seconds = 30;         // knob live_stall_seconds
  static Result<LiveSettings> from_knobs(const serving::Knobs& knobs);
  static std::vector<std::string> knob_names();
};

struct LiveStreamOptions {
  std::optional<std::string> language;
  std::optional<media::VadParams> vad;  // the session's turn_detection, else the deployment's
  std::string prompt;
};

// Called on the scheduler's or the engine's thread; keep short (queue a send).
struct LiveStreamEvents {
  std::function<void(int64_t item, double audio_start_s)> on_speech_started;
  std::function<void(int64_t item, double audio_end_s)> on_speech_stopped;
  // The utterance's text so far (replaces the previous partial of the same item).
  std::function<void(int64_t item, const std::string& text)> on_partial;
  std::function<void(int64_t item, const Transcript& final)> on_final;
  std::function<void(const Status& error)> on_error;  // then the stream is closed
};

class LiveStream {
 public:
  virtual ~LiveStream() = default;
  // 16 kHz mono samples; any size. failed_precondition once closed.
  virtual Status append(std::span<const float> samples) = 0;
  // Ends the current utterance now (final decode of what was buffered), as
  // input_audio_buffer.commit does.
  virtual void commit() = 0;
  virtual void clear() = 0;  // drops buffered audio not yet in a final
  virtual void close() = 0;  // idempotent; in-flight decodes are cancelled
};

class LiveScheduler {
 public:
  // One per transcribe deployment, sharing its TranscriptionContext (frontend, VAD, submit).
  static std::shared_ptr<LiveScheduler> create(TranscriptionContext context, LiveSettings settings);
  virtual ~LiveScheduler() = default;
  virtual Result<std::shared_ptr<LiveStream>> open(LiveStreamOptions options, LiveStreamEvents events) = 0;
  virtual int open_streams() const = 0;
  virtual void stop() = 0;  // closes every stream, joins the thread
};

}  // namespace prism::engines::transcribe

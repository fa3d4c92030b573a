// pipelines/transcribe/live.h: live transcription of many audio streams at once. Each stream
// appends 16 kHz samples as they arrive; one scheduler thread per deployment wakes every
// live_tick_ms and, for all streams together, scores the new VAD windows (one batch per window
// index), advances each stream's endpointer (media::StreamingEndpointer: speech started /
// stopped) and queues the decodes that are due — a partial re-decoded over the utterance's last
// live_window_seconds whenever live_partial_ms of new speech arrived and the stream has no
// partial in flight, and a final over the whole utterance when speech stops, on commit(), or at
// live_max_utterance_seconds (sherpa-onnx's 20 s). Decodes of every stream go to the engine
// together and are batched there. Partials encode only their window (whisper.cpp's reduced
// audio_ctx: frames = window / 160, rounded up to even) without timestamps; finals encode the
// whole utterance padded to 30 s, with timestamps, checked and re-run as long-form chunks are
// (quality.h). A stream whose client stalls (no audio for live_stall_seconds while open) or
// floods (more unprocessed audio than the scheduler can take) is closed with an error event;
// the others never notice.
// Must not: block the caller of append() (a lock and a copy), hold a lock across a submit or an
// event callback, or run compute pools of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "pipelines/transcribe/transcription.h"
#include "media/speech_spans.h"
#include "serving/request.h"

namespace prism::pipelines::transcribe {

struct LiveSettings {
  int tick_ms = 10;                   // knob live_tick_ms: 1..1000
  int partial_ms = 200;               // knob live_partial_ms: new speech between partials, 32..10000
  double window_seconds = 5.0;        // knob live_window_seconds: partials decode this much at most, 1..30
  double max_utterance_seconds = 20;  // knob live_max_utterance_seconds: 1..30
  double stall_seconds = 30;          // knob live_stall_seconds: > 0
  Status validate() const;            // invalid_argument naming the knob
  static Result<LiveSettings> from_knobs(const serving::Knobs& knobs);
  static std::vector<std::string> knob_names();
};

// Test hooks: a clock to replace steady_clock (stall detection, latency) and hand-driven ticks
// (no thread: LiveScheduler::tick() runs one). Production code passes none.
struct LiveHooks {
  std::function<serving::Clock::time_point()> now;
  bool manual_ticks = false;
};

struct LiveStreamOptions {
  std::optional<std::string> language;  // checked by open(); none: detected per decode
  // false: no endpointing (OpenAI's turn_detection null) — only commit() and the maximum
  // utterance length end an item, and speech_started / speech_stopped never fire.
  bool server_vad = true;
  std::optional<media::VadParams> vad;  // the session's turn_detection, else the deployment's
  std::string prompt;                   // conditions every decode (OpenAI's prompt)
  std::string request_id;               // for logs
};

// A partial result: the text of the window [start, end) of item `item` (seconds of the stream).
// The window is the whole utterance until it is longer than live_window_seconds, then its last
// live_window_seconds: consecutive partials of a long item overlap and are not prefixes of
// each other.
struct LivePartial {
  int64_t item = 0;
  double start = 0, end = 0;
  std::string text;
};

// Called on the scheduler's, the engine's or (for a flood) append()'s thread, one at a time per
// stream and in order: speech_started(n) < partials(n) < speech_stopped(n) < committed(n) <
// final(n) or final_failed(n), and finals in item order. Keep them short (queue a send); they
// may call the stream's methods. Nothing fires after close(), except the on_error of a stream
// the scheduler closes.
struct LiveStreamEvents {
  std::function<void(int64_t item, double audio_start_s)> on_speech_started;
  std::function<void(int64_t item, double audio_end_s)> on_speech_stopped;
  // The item's audio [start_s, end_s) is fixed and its final decode queued.
  std::function<void(int64_t item, double start_s, double end_s)> on_committed;
  std::function<void(const LivePartial& partial)> on_partial;
  // Segment times are seconds of the stream (not of the item).
  std::function<void(int64_t item, const Transcript& final)> on_final;
  // The item's final decode failed (engine error, queue full); the stream goes on.
  std::function<void(int64_t item, const Status& error)> on_final_failed;
  // The stream was closed by the scheduler: deadline_exceeded (stalled), resource_exhausted
  // (flooded) or an internal error.
  std::function<void(const Status& error)> on_error;
};

class LiveStream {
 public:
  virtual ~LiveStream() = default;
  // 16 kHz mono samples; any size. failed_precondition once closed; resource_exhausted when
  // the stream floods (it is then closed and on_error fires).
  virtual Status append(std::span<const float> samples) = 0;
  // Ends the current item with what was appended so far (OpenAI's input_audio_buffer.commit):
  // the open utterance, else (no speech in progress) the audio since the previous item, at most
  // live_max_utterance_seconds of it. invalid_argument when that is under 100 ms of audio
  // (OpenAI's "buffer too small"); failed_precondition once closed.
  virtual Status commit() = 0;
  // Drops appended audio not yet in an item's final (an open utterance ends without events).
  virtual void clear() = 0;
  // New options from the next tick on; an open utterance is first committed. invalid_argument
  // for an unknown language.
  virtual Status update(LiveStreamOptions options) = 0;
  virtual void close() = 0;  // idempotent; in-flight decodes are cancelled, no more events
  virtual bool closed() const = 0;
};

class LiveScheduler {
 public:
  // One per transcribe deployment, sharing its TranscriptionContext (frontend, VAD, submit).
  static std::shared_ptr<LiveScheduler> create(TranscriptionContext context, LiveSettings settings,
                                               LiveHooks hooks = {});
  virtual ~LiveScheduler() = default;
  // invalid_argument for an unknown language or bad VAD parameters; failed_precondition when the
  // deployment is not a speech model or the scheduler stopped.
  virtual Result<std::shared_ptr<LiveStream>> open(LiveStreamOptions options, LiveStreamEvents events) = 0;
  virtual int open_streams() const = 0;
  // The deployment's VAD parameters (what a stream without options.vad uses).
  virtual media::VadParams vad_params() const = 0;
  virtual const LiveSettings& settings() const = 0;
  virtual void tick() = 0;  // LiveHooks::manual_ticks only: runs one tick on the caller's thread
  virtual void stop() = 0;  // closes every stream, joins the thread; idempotent
};

}  // namespace prism::pipelines::transcribe

// api/routes/realtime.h: live transcription over WebSocket, on a transcribe deployment's
// LiveScheduler (pipelines/transcribe/live.h).
//
//   GET /v1/realtime?intent=transcription[&model=NAME]   OpenAI's Realtime transcription events.
//     In: transcription_session.update (or session.update, beta or GA shape) {input_audio_format
//     "pcm16" (24 kHz; 16 kHz with the extension "prism": {"sample_rate": 16000}, or GA's
//     audio.input.format {"type": "audio/pcm", "rate": 16000}), input_audio_transcription
//     {model, language, prompt}, turn_detection {"type": "server_vad", threshold,
//     prefix_padding_ms (→ the VAD's speech padding), silence_duration_ms (→ its minimum
//     silence)} or null (then only commit ends an item)}; input_audio_buffer.append {audio:
//     base64 PCM16 LE mono}; input_audio_buffer.commit; input_audio_buffer.clear.
//     Out: transcription_session.created / .updated (session.updated for session.update),
//     input_audio_buffer.speech_started / speech_stopped / committed / cleared,
//     conversation.item.created, conversation.item.input_audio_transcription.delta /
//     .completed / .failed, error. The model comes from the query or from the session's
//     input_audio_transcription.model (it may change only before any audio was sent). A bad
//     event (not JSON, unknown type, bad base64, odd byte count, unsupported format, bad
//     field) gets an error event naming it (error.event_id = the client's event_id) and the
//     session goes on; a stream that stalls or floods gets an error event, then close 1008; an
//     internal failure closes with 1011.
//   GET /v1/audio/stream?model=NAME[&sample_rate=16000][&language=xx][&vad=server|none]
//     [&prompt=...]   the simple binary mode: binary messages of raw PCM16 LE mono in (16 kHz
//     unless sample_rate says otherwise); text messages {"type": "commit"} / {"type": "clear"};
//     out, JSON text messages: {"type": "partial", "item", "text", "start", "end"} (the text
//     of the item's last live_window_seconds [start, end), replacing the previous partial of
//     the item), {"type": "final", "item", "text", "start", "end", "language", "segments":
//     [{"start", "end", "text"}]}, {"type": "error", "error": {...}} (with "item" when one
//     item's final failed; the stream goes on, else it closes as above). Times in seconds of
//     the stream.
// Must not: block an I/O thread (appends are a copy), or touch tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/errors.h"
#include "api/router.h"
#include "pipelines/transcribe/asr_service.h"
#include "pipelines/transcribe/live.h"

namespace prism::api {

// `asr` is not owned and must outlive the server.
void add_realtime_routes(Router& router, pipelines::transcribe::AsrServices& asr);

namespace realtime {

// Deltas from partials.
// NOTE (the delta rule): a partial is the text of its item's last live_window_seconds, so
// consecutive partials overlap, and a later one may revise words. The words sent so far for
// the item are kept; a partial is aligned to them by the longest run of their last words found
// in it (at least two words once two were sent; compared without case and punctuation;
// earliest place first), and the partial's words after that run — except its last word,
// which the window's end may have cut — are the delta. With nothing sent yet the delta is the
// partial's words but the last. A partial that does not contain the tail of what was sent
// (it revised it) sends nothing. Deltas never retract: the completed event's transcript is the
// final decode's, and may differ from the deltas joined.
class DeltaTracker {
 public:
  // The text to send for this partial ("" when nothing new): words joined by single spaces,
  // with a leading space when something was sent before.
  std::string next(std::string_view partial_text);
  const std::string& sent() const { return sent_text_; }

 private:
  std::vector<std::string> sent_words_;  // normalized
  std::string sent_text_;
};

enum class Protocol : uint8_t { realtime, binary };

// A deployment's live scheduler by model name: not_found, invalid_argument (not a transcribe
// deployment) or unavailable (not ready) otherwise.
using SchedulerLookup =
    std::function<Result<std::shared_ptr<pipelines::transcribe::LiveScheduler>>(std::string_view model)>;

// Where a session writes; both thread-safe (a WebSocketConn's).
struct Output {
  std::function<void(std::string)> send_text;
  std::function<void(uint16_t code, std::string reason)> close;
};

struct SessionParams {
  Protocol protocol = Protocol::realtime;
  std::string model;                    // from the query; "" = none yet
  int sample_rate = 24000;              // of the PCM16 the client sends
  std::optional<std::string> language;  // binary mode's query
  std::string prompt;                   // binary mode's query
  bool server_vad = true;               // binary mode's query vad=none: false
  std::string request_id;
};

// One WebSocket connection. Messages arrive in order on the connection's I/O strand; stream
// events on the scheduler's and the engine's threads. Thread-safe.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // Sends transcription_session.created (realtime) and opens the stream when the model is
  // known; an unknown model, a deployment of another task or bad query parameters: an error
  // event, then close 1008 (1013 while the deployment is not ready).
  static std::shared_ptr<Session> start(SessionParams params, SchedulerLookup lookup, Output out);
  void on_message(std::string_view message, bool binary);
  void on_close();  // the connection ended: the stream is closed

  // The state of a session's configuration, as the update events report it.
  struct Config {
    std::string model;
    std::optional<std::string> language;
    std::string prompt;
    int sample_rate = 24000;
    bool server_vad = true;
    std::optional<double> threshold;             // unset: the deployment's
    std::optional<int64_t> prefix_padding_ms;    // → VadParams::speech_pad_ms
    std::optional<int64_t> silence_duration_ms;  // → VadParams::min_silence_ms
  };

 private:
  Session(SessionParams params, SchedulerLookup lookup, Output out);

  // Realtime protocol.
  void on_event(const nlohmann::json& event, const std::string& client_event_id);
  void on_session_update(const nlohmann::json& event, const std::string& type, const std::string& client_event_id);
  void on_append(const nlohmann::json& event, const std::string& client_event_id);
  void on_commit(const std::string& client_event_id);
  void on_clear();
  // Binary protocol.
  void on_binary_message(std::string_view message, bool binary);

  // Opens (or re-configures) the stream for `next`; the client's error otherwise.
  std::optional<ApiError> apply(const Config& next);
  Status append_pcm16(std::string_view bytes);
  pipelines::transcribe::LiveStreamOptions options_of(const Config& c,
                                                    const pipelines::transcribe::LiveScheduler& scheduler) const;
  pipelines::transcribe::LiveStreamEvents events();
  nlohmann::json session_json(bool ga_shape) const;

  // Stream events (any thread).
  void on_speech(int64_t item, double seconds, bool started);
  void on_committed(int64_t item, double start, double end);
  void on_partial(const pipelines::transcribe::LivePartial& partial);
  void on_final(int64_t item, const pipelines::transcribe::Transcript& transcript);
  void on_final_failed(int64_t item, const Status& error);
  void on_stream_error(const Status& error);

  void send(nlohmann::json event);  // adds event_id (realtime)
  void send_error(ApiError error, const std::string& client_event_id = {});
  std::string item_id(int64_t item) const;

  const Protocol protocol_;
  const std::string session_id_;
  const std::string request_id_;
  SchedulerLookup lookup_;
  Output out_;

  // ---- I/O strand only ----
  std::shared_ptr<pipelines::transcribe::LiveScheduler> scheduler_;
  bool audio_sent_ = false;

  // ---- mu_: read by event threads ----
  mutable std::mutex mu_;
  Config config_;
  std::shared_ptr<pipelines::transcribe::LiveStream> stream_;
  uint64_t next_event_ = 0;
  std::map<int64_t, DeltaTracker> deltas_;
  std::map<int64_t, std::pair<double, double>> item_times_;  // committed items' [start, end)
  std::optional<int64_t> last_committed_;
  bool closed_ = false;
};

}  // namespace realtime

}  // namespace prism::api

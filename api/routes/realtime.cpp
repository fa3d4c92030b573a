// api/routes/realtime.cpp: the Realtime transcription WebSocket and the binary live stream.
// Parsing and validation happen here, on the connection's I/O strand; audio goes to the
// deployment's LiveScheduler as a copy (LiveStream::append), and its events come back on the
// scheduler's and the engine's threads, which only format JSON and queue it on the connection.
#include "api/routes/realtime.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <thread>
#include <utility>

#include "api/json_fields.h"
#include "base/log.h"
#include "media/audio.h"
#include "text/precompiled.h"

namespace prism::api {

namespace {

using pipelines::transcribe::LivePartial;
using pipelines::transcribe::LiveScheduler;
using pipelines::transcribe::LiveStream;
using pipelines::transcribe::LiveStreamEvents;
using pipelines::transcribe::LiveStreamOptions;
using pipelines::transcribe::Transcript;
using nlohmann::json;
using SessionConfig = realtime::Session::Config;

constexpr int kMinSampleRate = 8000;
constexpr int kMaxSampleRate = 48000;
constexpr int64_t kMaxVadMs = 10000;

// Close codes (RFC 6455): the client broke a rule / the server failed / try again later.
constexpr uint16_t kClosePolicy = 1008;
constexpr uint16_t kCloseInternal = 1011;
constexpr uint16_t kCloseTryLater = 1013;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json null_if_empty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

std::string random_hex() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A query value, percent-decoded ('+' is a space, as forms write it).
std::string query_value(const Request& request, std::string_view name) {
  std::string_view raw = request.query_param(name);
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%' && i + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(raw.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

// ---- errors ------------------------------------------------------------------------------------

ApiError invalid_event(std::string message, std::string code, std::string param = {}) {
  ApiError e = bad_request(std::move(message), std::move(code));
  e.param = std::move(param);
  return e;
}

// A lookup's failure as the client's error; `param` names where the model came from.
ApiError lookup_error(const Status& s, const std::string& model, const std::string& param) {
  if (s.code() == StatusCode::not_found) {
    ApiError e = model_not_found(model);
    e.param = param;
    return e;
  }
  if (s.code() == StatusCode::invalid_argument) return invalid_field(param, s.message());
  return from_status(s, param);
}

uint16_t close_code_for(const ApiError& e) {
  if (e.status == 503 || e.status == 429) return kCloseTryLater;
  return e.status >= 500 ? kCloseInternal : kClosePolicy;
}

// ---- session objects ---------------------------------------------------------------------------

// Reads a nested object field: absent → nullptr (unchanged); null → a null json; anything but
// an object → an error naming it.
const json* object_field(const json& parent, std::string_view key, const std::string& param,
                         std::optional<ApiError>& error) {
  auto it = parent.find(key);
  if (it == parent.end()) return nullptr;
  if (!it->is_object() && !it->is_null()) {
    error = invalid_field(param, std::string("must be an object, got ") + json_type_name(*it) + ".");
    return nullptr;
  }
  return &*it;
}

// Optional string field (null clears it).
void read_string(const json& parent, std::string_view key, const std::string& param, std::optional<std::string>& out,
                 std::optional<ApiError>& error) {
  if (error) return;
  auto it = parent.find(key);
  if (it == parent.end()) return;
  if (it->is_null()) {
    out.reset();
  } else if (it->is_string()) {
    out = it->get<std::string>();
  } else {
    error = invalid_field(param, std::string("must be a string, got ") + json_type_name(*it) + ".");
  }
}

void read_transcription(const json& t, const std::string& prefix, SessionConfig& c, std::optional<ApiError>& error) {
  std::optional<std::string> model = c.model.empty() ? std::nullopt : std::optional<std::string>(c.model);
  read_string(t, "model", prefix + ".model", model, error);
  read_string(t, "language", prefix + ".language", c.language, error);
  std::optional<std::string> prompt = c.prompt;
  read_string(t, "prompt", prefix + ".prompt", prompt, error);
  if (error) return;
  c.model = model.value_or("");
  c.prompt = prompt.value_or("");
  if (c.language && trim(*c.language).empty()) c.language.reset();
}

void read_turn_detection(const json& t, const std::string& prefix, SessionConfig& c, std::optional<ApiError>& error) {
  if (t.is_null()) {
    c.server_vad = false;
    return;
  }
  const std::string type = t.value("type", std::string("server_vad"));
  if (type == "semantic_vad") {
    error = invalid_field(prefix + ".type", "'semantic_vad' is not supported; use 'server_vad' or null.");
    return;
  }
  if (type != "server_vad") {
    error = invalid_field(prefix + ".type", "must be 'server_vad' (or turn_detection null).");
    return;
  }
  c.server_vad = true;
  if (auto it = t.find("threshold"); it != t.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0.0 && it->get<double>() < 1.0)) {
      error = invalid_field(prefix + ".threshold", "must be a number between 0 and 1 (exclusive).");
      return;
    }
    c.threshold = it->get<double>();
  }
  auto read_ms = [&](std::string_view key, std::optional<int64_t>& out) {
    auto it = t.find(key);
    if (error || it == t.end() || it->is_null()) return;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxVadMs) {
      error = invalid_field(prefix + "." + std::string(key), "must be an integer between 0 and 10000.");
      return;
    }
    out = it->get<int64_t>();
  };
  read_ms("prefix_padding_ms", c.prefix_padding_ms);
  read_ms("silence_duration_ms", c.silence_duration_ms);
}

void read_sample_rate(const json& v, const std::string& param, SessionConfig& c, std::optional<ApiError>& error) {
  if (v.is_null()) return;
  if (!v.is_number_integer() || v.get<int64_t>() < kMinSampleRate || v.get<int64_t>() > kMaxSampleRate) {
    error = invalid_field(param, "must be an integer sample rate between 8000 and 48000 (24000 or 16000).");
    return;
  }
  c.sample_rate = static_cast<int>(v.get<int64_t>());
}

// A session object of either shape (beta: input_audio_*; GA: type + audio.input) over
// `current`; fields left out keep their values. ga: the GA shape was used.
std::optional<ApiError> parse_session(const json& s, SessionConfig& c, bool& ga) {
  std::optional<ApiError> error;
  if (auto it = s.find("type"); it != s.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "transcription")
      return invalid_field("session.type", "only 'transcription' sessions are served here.");
    ga = true;
  }
  if (auto it = s.find("input_audio_format"); it != s.end() && !it->is_null()) {
    if (!it->is_string()) return invalid_field("session.input_audio_format", "must be a string.");
    const std::string f = it->get<std::string>();
    if (f == "g711_ulaw" || f == "g711_alaw")
      return invalid_event("Unsupported input_audio_format '" + f + "': only 'pcm16' is supported.",
                           "unsupported_format", "session.input_audio_format");
    if (f != "pcm16") return invalid_field("session.input_audio_format", "must be 'pcm16'.");
  }
  if (const json* t = object_field(s, "input_audio_transcription", "session.input_audio_transcription", error);
      t && t->is_object())
    read_transcription(*t, "session.input_audio_transcription", c, error);
  if (error) return error;
  if (auto it = s.find("turn_detection"); it != s.end()) {
    if (!it->is_object() && !it->is_null())
      return invalid_field("session.turn_detection", "must be an object or null.");
    read_turn_detection(*it, "session.turn_detection", c, error);
  }
  if (error) return error;
  if (const json* p = object_field(s, "prism", "session.prism", error); p && p->is_object()) {
    if (auto it = p->find("sample_rate"); it != p->end()) read_sample_rate(*it, "session.prism.sample_rate", c, error);
  }
  if (error) return error;
  // GA: session.audio.input {format, transcription, turn_detection}.
  const json* audio = object_field(s, "audio", "session.audio", error);
  if (error || audio == nullptr || !audio->is_object()) return error;
  ga = true;
  const json* input = object_field(*audio, "input", "session.audio.input", error);
  if (error || input == nullptr || !input->is_object()) return error;
  if (const json* f = object_field(*input, "format", "session.audio.input.format", error); f && f->is_object()) {
    const std::string type = f->value("type", std::string("audio/pcm"));
    if (type != "audio/pcm")
      return invalid_event("Unsupported audio format '" + type + "': only 'audio/pcm' is supported.",
                           "unsupported_format", "session.audio.input.format.type");
    if (auto it = f->find("rate"); it != f->end()) read_sample_rate(*it, "session.audio.input.format.rate", c, error);
  }
  if (error) return error;
  if (const json* t = object_field(*input, "transcription", "session.audio.input.transcription", error);
      t && t->is_object())
    read_transcription(*t, "session.audio.input.transcription", c, error);
  if (error) return error;
  if (auto it = input->find("turn_detection"); it != input->end()) {
    if (!it->is_object() && !it->is_null())
      return invalid_field("session.audio.input.turn_detection", "must be an object or null.");
    read_turn_detection(*it, "session.audio.input.turn_detection", c, error);
  }
  return error;
}

// Event types of the conversation API that a transcription session does not serve.
bool is_conversation_event(std::string_view type) {
  return type.starts_with("response.") || type.starts_with("conversation.") || type.starts_with("output_audio_buffer.");
}

// Words of a text split at white space, and their forms for comparison (lower case, letters and
// digits only; other bytes of UTF-8 kept).
std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) words.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

std::string normalized(std::string_view word) {
  std::string out;
  for (char c : word) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80 || std::isalnum(u)) out += static_cast<char>(std::tolower(u));
  }
  return out.empty() ? std::string(word) : out;
}

}  // namespace

namespace realtime {

// ---- DeltaTracker ------------------------------------------------------------------------------

std::string DeltaTracker::next(std::string_view partial_text) {
  const std::vector<std::string> words = split_words(partial_text);
  if (words.size() < 2) return {};  // its only word may be cut
  std::vector<std::string> norm;
  norm.reserve(words.size());
  for (const std::string& w : words) norm.push_back(normalized(w));
  const size_t usable = words.size() - 1;  // the last word is held back
  size_t from = 0;                         // first word of the partial not yet sent
  if (!sent_words_.empty()) {
    const size_t n = sent_words_.size();
    const size_t min_run = std::min<size_t>(n, 2);
    bool found = false;
    for (size_t m = std::min(n, norm.size()); m >= min_run && !found; --m) {
      for (size_t p = 0; p + m <= norm.size(); ++p) {
        if (std::equal(norm.begin() + static_cast<ptrdiff_t>(p), norm.begin() + static_cast<ptrdiff_t>(p + m),
                       sent_words_.end() - static_cast<ptrdiff_t>(m))) {
          from = p + m;
          found = true;
          break;
        }
      }
    }
    if (!found) return {};
  }
  if (from >= usable) return {};
  std::string delta;
  for (size_t i = from; i < usable; ++i) {
    if (!delta.empty() || !sent_text_.empty()) delta += ' ';
    delta += words[i];
    sent_words_.push_back(norm[i]);
  }
  sent_text_ += delta;
  return delta;
}

// ---- Session -----------------------------------------------------------------------------------

Session::Session(SessionParams params, SchedulerLookup lookup, Output out)
    : protocol_(params.protocol),
      session_id_("sess_" + random_hex()),
      request_id_(std::move(params.request_id)),
      lookup_(std::move(lookup)),
      out_(std::move(out)) {
  config_.sample_rate = params.sample_rate;
  config_.language = std::move(params.language);
  config_.prompt = std::move(params.prompt);
  config_.server_vad = params.server_vad;
}

std::shared_ptr<Session> Session::start(SessionParams params, SchedulerLookup lookup, Output out) {
  std::string model = std::move(params.model);
  std::shared_ptr<Session> s(new Session(std::move(params), std::move(lookup), std::move(out)));
  std::optional<ApiError> refused;
  if (!model.empty()) {
    Config initial = s->config_;
    initial.model = std::move(model);
    refused = s->apply(initial);
    // Query parameters are named as the query names them.
    if (refused && refused->param.starts_with("session.input_audio_transcription."))
      refused->param = refused->param.substr(std::string_view("session.input_audio_transcription.").size());
  } else if (s->protocol_ == Protocol::binary) {
    refused = invalid_field("model", "is required: connect to /v1/audio/stream?model=NAME.");
  }
  if (refused) {
    s->send_error(*refused);
    s->out_.close(close_code_for(*refused), refused->status == 404 ? "model not found" : "invalid request");
    s->on_close();
    return s;
  }
  if (s->protocol_ == Protocol::realtime)
    s->send({{"type", "transcription_session.created"}, {"session", s->session_json(false)}});
  return s;
}

void Session::on_close() {
  std::shared_ptr<LiveStream> stream;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    stream = std::move(stream_);
  }
  if (stream) stream->close();
}

void Session::on_message(std::string_view message, bool binary) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
  }
  if (protocol_ == Protocol::binary) return on_binary_message(message, binary);
  if (binary) {
    return send_error(invalid_event(
        "Binary messages are not part of the Realtime API: send input_audio_buffer.append events with base64 "
        "audio (or use /v1/audio/stream for raw PCM16).",
        "invalid_message"));
  }
  json event = json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded()) return send_error(invalid_json("a Realtime event must be one JSON object"));
  if (!event.is_object())
    return send_error(
        invalid_json(std::string("a Realtime event must be a JSON object, got ") + json_type_name(event)));
  std::string client_event_id;
  if (auto it = event.find("event_id"); it != event.end() && it->is_string()) client_event_id = it->get<std::string>();
  on_event(event, client_event_id);
}

void Session::on_event(const json& event, const std::string& client_event_id) {
  auto it = event.find("type");
  if (it == event.end() || !it->is_string()) {
    ApiError e = invalid_field("type", "this field is required.");
    e.message = "Missing required parameter: 'type'.";
    e.code = "missing_required_parameter";
    return send_error(e, client_event_id);
  }
  const std::string type = it->get<std::string>();
  if (type == "transcription_session.update" || type == "session.update")
    return on_session_update(event, type, client_event_id);
  if (type == "input_audio_buffer.append") return on_append(event, client_event_id);
  if (type == "input_audio_buffer.commit") return on_commit(client_event_id);
  if (type == "input_audio_buffer.clear") return on_clear();
  if (is_conversation_event(type)) {
    return send_error(
        invalid_event("'" + type + "' is not supported in a transcription session.", "unsupported_event", "type"),
        client_event_id);
  }
  send_error(invalid_event("Invalid value: '" + type +
                               "'. Supported values are: 'transcription_session.update', 'session.update', "
                               "'input_audio_buffer.append', 'input_audio_buffer.commit' and "
                               "'input_audio_buffer.clear'.",
                           "invalid_value", "type"),
             client_event_id);
}

void Session::on_session_update(const json& event, const std::string& type, const std::string& client_event_id) {
  auto it = event.find("session");
  if (it == event.end() || !it->is_object()) {
    return send_error(invalid_field("session", "must be an object (the session's new settings)."), client_event_id);
  }
  Config next;
  {
    std::lock_guard lock(mu_);
    next = config_;
  }
  bool ga = type == "session.update" && it->contains("audio");
  if (std::optional<ApiError> e = parse_session(*it, next, ga)) return send_error(*e, client_event_id);
  if (std::optional<ApiError> e = apply(next)) return send_error(*e, client_event_id);
  send({{"type", type == "session.update" ? "session.updated" : "transcription_session.updated"},
        {"session", session_json(ga)}});
}

void Session::on_append(const json& event, const std::string& client_event_id) {
  auto it = event.find("audio");
  if (it == event.end() || !it->is_string()) {
    ApiError e = invalid_field("audio", "this field is required.");
    e.message = "Missing required parameter: 'audio' (base64-encoded PCM16 audio).";
    e.code = "missing_required_parameter";
    return send_error(e, client_event_id);
  }
  Result<std::string> bytes = text::base64_decode(it->get_ref<const std::string&>());
  if (!bytes.has_value()) {
    ApiError e = invalid_field("audio", "is not valid base64 (" + bytes.status().message() + ").");
    e.code = "invalid_base64";
    return send_error(e, client_event_id);
  }
  if (Status s = append_pcm16(bytes.value()); !s.ok()) {
    ApiError e = invalid_field("audio", s.message());
    if (s.code() == StatusCode::failed_precondition) {
      e = invalid_event(s.message(), "missing_required_parameter", "session.input_audio_transcription.model");
    }
    send_error(e, client_event_id);
  }
}

// Converts and appends; the error is the client's (odd byte count, no stream yet).
Status Session::append_pcm16(std::string_view bytes) {
  std::shared_ptr<LiveStream> stream;
  int rate = 0;
  {
    std::lock_guard lock(mu_);
    stream = stream_;
    rate = config_.sample_rate;
  }
  if (!stream) {
    return failed_precondition(
        "No transcription model yet: connect with ?model=NAME or send transcription_session.update with "
        "input_audio_transcription.model first.");
  }
  if (bytes.size() % 2 != 0) {
    return invalid_argument("PCM16 audio has 2 bytes a sample, got an odd count of " + std::to_string(bytes.size()) +
                            " bytes.");
  }
  if (bytes.empty()) return Status();
  Result<std::vector<float>> samples = media::pcm16_to_speech(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), rate);
  if (!samples.has_value()) return invalid_argument(samples.status().message());
  audio_sent_ = true;
  // An error here closes the stream and arrives as its on_error (flood) or means it is closed.
  (void)stream->append(samples.value());
  return Status();
}

void Session::on_commit(const std::string& client_event_id) {
  std::shared_ptr<LiveStream> stream;
  {
    std::lock_guard lock(mu_);
    stream = stream_;
  }
  Status s = stream ? stream->commit() : invalid_argument("buffer too small: no audio was appended");
  if (s.ok()) return;  // input_audio_buffer.committed comes with the item (on_committed)
  if (s.code() == StatusCode::failed_precondition) return;  // closed: its error was sent
  send_error(
      invalid_event("Error committing input audio buffer: " + s.message() + ".", "input_audio_buffer_commit_empty"),
      client_event_id);
}

void Session::on_clear() {
  std::shared_ptr<LiveStream> stream;
  {
    std::lock_guard lock(mu_);
    stream = stream_;
    deltas_.clear();
  }
  if (stream) stream->clear();
  send({{"type", "input_audio_buffer.cleared"}});
}

void Session::on_binary_message(std::string_view message, bool binary) {
  if (binary) {
    Status s = append_pcm16(message);
    if (!s.ok()) send_error(invalid_event(s.message(), "invalid_audio"));
    return;
  }
  json event = json::parse(message, nullptr, /*allow_exceptions=*/false);
  const std::string type = event.is_object() && event.contains("type") && event["type"].is_string()
                               ? event["type"].get<std::string>()
                               : std::string();
  std::shared_ptr<LiveStream> stream;
  {
    std::lock_guard lock(mu_);
    stream = stream_;
  }
  if (type == "commit") {
    Status s = stream ? stream->commit() : invalid_argument("no audio was sent");
    if (!s.ok() && s.code() != StatusCode::failed_precondition)
      send_error(invalid_event("Nothing to commit: " + s.message() + ".", "input_audio_buffer_commit_empty"));
  } else if (type == "clear") {
    if (stream) stream->clear();
  } else {
    send_error(
        invalid_event("Text messages must be {\"type\": \"commit\"} or {\"type\": \"clear\"}; audio goes in "
                      "binary messages of PCM16.",
                      "invalid_message", "type"));
  }
}

LiveStreamOptions Session::options_of(const Config& c, const LiveScheduler& scheduler) const {
  LiveStreamOptions o;
  o.language = c.language;
  o.prompt = c.prompt;
  o.server_vad = c.server_vad;
  o.request_id = request_id_;
  if (c.threshold || c.prefix_padding_ms || c.silence_duration_ms) {
    media::VadParams p = scheduler.vad_params();
    if (c.threshold) p.threshold = static_cast<float>(*c.threshold);
    if (c.prefix_padding_ms) p.speech_pad_ms = static_cast<int>(*c.prefix_padding_ms);
    if (c.silence_duration_ms) p.min_silence_ms = static_cast<int>(*c.silence_duration_ms);
    o.vad = p;
  }
  return o;
}

std::optional<ApiError> Session::apply(const Config& next) {
  Config current;
  std::shared_ptr<LiveStream> stream;
  {
    std::lock_guard lock(mu_);
    current = config_;
    stream = stream_;
  }
  const std::string model_param = "session.input_audio_transcription.model";
  // A bad language or VAD value from the scheduler: name the field that changed.
  auto option_error = [&](const Status& s) {
    const bool language = next.language != current.language || !stream;
    const bool lang_msg = s.message().find("anguage") != std::string::npos;
    return invalid_field(language && lang_msg ? "session.input_audio_transcription.language" : "session.turn_detection",
                         s.message());
  };
  if (next.model.empty()) {
    if (!current.model.empty()) return invalid_field(model_param, "cannot be removed once set.");
    std::lock_guard lock(mu_);
    config_ = next;
    return std::nullopt;
  }
  if (next.model != current.model || !stream) {
    if (stream && audio_sent_)
      return invalid_field(model_param, "cannot change once audio was sent; open a new session.");
    Result<std::shared_ptr<LiveScheduler>> scheduler = lookup_(next.model);
    if (!scheduler.has_value()) return lookup_error(scheduler.status(), next.model, model_param);
    Result<std::shared_ptr<LiveStream>> opened =
        scheduler.value()->open(options_of(next, *scheduler.value()), events());
    if (!opened.has_value()) {
      if (opened.status().code() == StatusCode::invalid_argument) return option_error(opened.status());
      return lookup_error(opened.status(), next.model, model_param);
    }
    std::shared_ptr<LiveStream> old;
    {
      std::lock_guard lock(mu_);
      config_ = next;
      old = std::exchange(stream_, opened.value());
      if (closed_) old = std::exchange(stream_, nullptr);  // the connection ended meanwhile
    }
    scheduler_ = scheduler.value();
    if (old) old->close();
    return std::nullopt;
  }
  const bool options_changed = next.language != current.language || next.prompt != current.prompt ||
                               next.server_vad != current.server_vad || next.threshold != current.threshold ||
                               next.prefix_padding_ms != current.prefix_padding_ms ||
                               next.silence_duration_ms != current.silence_duration_ms;
  if (options_changed) {
    Status s = stream->update(options_of(next, *scheduler_));
    if (!s.ok() && s.code() == StatusCode::invalid_argument) return option_error(s);
  }
  std::lock_guard lock(mu_);
  config_ = next;
  return std::nullopt;
}

json Session::session_json(bool ga_shape) const {
  Config c;
  {
    std::lock_guard lock(mu_);
    c = config_;
  }
  const media::VadParams vad = scheduler_ ? scheduler_->vad_params() : media::VadParams{};
  json turn = nullptr;
  if (c.server_vad) {
    turn = {{"type", "server_vad"},
            {"threshold", c.threshold.value_or(vad.threshold)},
            {"prefix_padding_ms", c.prefix_padding_ms.value_or(vad.speech_pad_ms)},
            {"silence_duration_ms", c.silence_duration_ms.value_or(vad.min_silence_ms)}};
  }
  const json transcription = {{"model", null_if_empty(c.model)},
                              {"language", c.language ? json(*c.language) : json(nullptr)},
                              {"prompt", c.prompt}};
  if (ga_shape) {
    return {{"type", "transcription"},
            {"id", session_id_},
            {"object", "realtime.transcription_session"},
            {"audio",
             {{"input",
               {{"format", {{"type", "audio/pcm"}, {"rate", c.sample_rate}}},
                {"transcription", transcription},
                {"turn_detection", turn},
                {"noise_reduction", nullptr}}}}},
            {"include", nullptr}};
  }
  return {{"id", session_id_},
          {"object", "realtime.transcription_session"},
          {"input_audio_format", "pcm16"},
          {"input_audio_transcription", transcription},
          {"turn_detection", turn},
          {"input_audio_noise_reduction", nullptr},
          {"include", nullptr},
          {"prism", {{"sample_rate", c.sample_rate}}}};
}

// ---- stream events -----------------------------------------------------------------------------

LiveStreamEvents Session::events() {
  std::weak_ptr<Session> w = weak_from_this();
  LiveStreamEvents ev;
  ev.on_speech_started = [w](int64_t item, double s) {
    if (auto p = w.lock()) p->on_speech(item, s, true);
  };
  ev.on_speech_stopped = [w](int64_t item, double s) {
    if (auto p = w.lock()) p->on_speech(item, s, false);
  };
  ev.on_committed = [w](int64_t item, double start, double end) {
    if (auto p = w.lock()) p->on_committed(item, start, end);
  };
  ev.on_partial = [w](const LivePartial& partial) {
    if (auto p = w.lock()) p->on_partial(partial);
  };
  ev.on_final = [w](int64_t item, const Transcript& t) {
    if (auto p = w.lock()) p->on_final(item, t);
  };
  ev.on_final_failed = [w](int64_t item, const Status& s) {
    if (auto p = w.lock()) p->on_final_failed(item, s);
  };
  ev.on_error = [w](const Status& s) {
    if (auto p = w.lock()) p->on_stream_error(s);
  };
  return ev;
}

std::string Session::item_id(int64_t item) const {
  return "item_" + session_id_.substr(5, 12) + "_" + std::to_string(item);
}

void Session::on_speech(int64_t item, double seconds, bool started) {
  if (protocol_ != Protocol::realtime) return;
  const auto ms = static_cast<int64_t>(std::llround(seconds * 1000.0));
  if (started) {
    send({{"type", "input_audio_buffer.speech_started"}, {"audio_start_ms", ms}, {"item_id", item_id(item)}});
  } else {
    send({{"type", "input_audio_buffer.speech_stopped"}, {"audio_end_ms", ms}, {"item_id", item_id(item)}});
  }
}

void Session::on_committed(int64_t item, double start, double end) {
  json previous = nullptr;
  {
    std::lock_guard lock(mu_);
    item_times_[item] = {start, end};
    if (last_committed_) previous = item_id(*last_committed_);
    last_committed_ = item;
  }
  if (protocol_ != Protocol::realtime) return;
  send({{"type", "input_audio_buffer.committed"}, {"previous_item_id", previous}, {"item_id", item_id(item)}});
  send({{"type", "conversation.item.created"},
        {"previous_item_id", previous},
        {"item",
         {{"id", item_id(item)},
          {"object", "realtime.item"},
          {"type", "message"},
          {"status", "completed"},
          {"role", "user"},
          {"content", json::array({{{"type", "input_audio"}, {"transcript", nullptr}}})}}}});
}

void Session::on_partial(const LivePartial& partial) {
  if (protocol_ == Protocol::binary) {
    send({{"type", "partial"},
          {"item", partial.item},
          {"text", std::string(trim(partial.text))},
          {"start", partial.start},
          {"end", partial.end}});
    return;
  }
  std::string delta;
  {
    std::lock_guard lock(mu_);
    delta = deltas_[partial.item].next(partial.text);
  }
  if (delta.empty()) return;
  send({{"type", "conversation.item.input_audio_transcription.delta"},
        {"item_id", item_id(partial.item)},
        {"content_index", 0},
        {"delta", delta}});
}

void Session::on_final(int64_t item, const Transcript& t) {
  std::pair<double, double> times{0.0, t.duration};
  {
    std::lock_guard lock(mu_);
    deltas_.erase(item);
    if (auto it = item_times_.find(item); it != item_times_.end()) {
      times = it->second;
      item_times_.erase(it);
    }
  }
  json segments = json::array();
  for (const auto& s : t.segments)
    segments.push_back({{"start", s.start}, {"end", s.end}, {"text", std::string(trim(s.text))}});
  const std::string text(trim(t.text));
  if (protocol_ == Protocol::binary) {
    send({{"type", "final"},
          {"item", item},
          {"text", text},
          {"start", times.first},
          {"end", times.second},
          {"language", t.language},
          {"segments", std::move(segments)}});
    return;
  }
  send(
      {{"type", "conversation.item.input_audio_transcription.completed"},
       {"item_id", item_id(item)},
       {"content_index", 0},
       {"transcript", text},
       {"usage", {{"type", "duration"}, {"seconds", t.duration}}},
       {"prism",
        {{"language", t.language}, {"start", times.first}, {"end", times.second}, {"segments", std::move(segments)}}}});
}

void Session::on_final_failed(int64_t item, const Status& error) {
  {
    std::lock_guard lock(mu_);
    deltas_.erase(item);
    item_times_.erase(item);
  }
  ApiError e = from_status(error);
  if (protocol_ == Protocol::binary) {
    send({{"type", "error"},
          {"item", item},
          {"error", {{"type", e.type}, {"code", null_if_empty(e.code)}, {"message", e.message}, {"param", nullptr}}}});
    return;
  }
  send({{"type", "conversation.item.input_audio_transcription.failed"},
        {"item_id", item_id(item)},
        {"content_index", 0},
        {"error", {{"type", e.type}, {"code", null_if_empty(e.code)}, {"message", e.message}, {"param", nullptr}}}});
}

void Session::on_stream_error(const Status& error) {
  ApiError e;
  uint16_t code = kCloseInternal;
  if (error.code() == StatusCode::deadline_exceeded) {
    e = invalid_event(error.message(), "input_audio_stalled");
    code = kClosePolicy;
  } else if (error.code() == StatusCode::resource_exhausted) {
    e = invalid_event(error.message(), "input_audio_flood");
    code = kClosePolicy;
  } else {
    PRISM_LOG_ERROR("realtime {}: live stream failed: {}", request_id_, error.to_string());
    e = server_error();
  }
  send_error(e);
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    stream_.reset();
  }
  out_.close(code, e.code);
}

// ---- output ------------------------------------------------------------------------------------

void Session::send(json event) {
  std::string text;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (protocol_ == Protocol::realtime) event["event_id"] = "event_" + std::to_string(++next_event_);
    text = dump(event);
  }
  out_.send_text(std::move(text));
}

void Session::send_error(ApiError e, const std::string& client_event_id) {
  json error = {
      {"type", e.type}, {"code", null_if_empty(e.code)}, {"message", e.message}, {"param", null_if_empty(e.param)}};
  if (protocol_ == Protocol::realtime) error["event_id"] = null_if_empty(client_event_id);
  send({{"type", "error"}, {"error", std::move(error)}});
}

}  // namespace realtime

// ---- routes ------------------------------------------------------------------------------------

namespace {

realtime::SchedulerLookup lookup_in(pipelines::transcribe::AsrServices* asr) {
  return [asr](std::string_view model) -> Result<std::shared_ptr<LiveScheduler>> {
    PRISM_ASSIGN_OR_RETURN(std::shared_ptr<pipelines::transcribe::AsrService> service, asr->find(model));
    if (!service->live)
      return unavailable("live transcription is not available for model '" + std::string(model) + "'");
    return service->live;
  };
}

realtime::Output output_of(WebSocketConn conn) {
  realtime::Output out;
  out.send_text = [conn](std::string text) mutable { conn.send_text(std::move(text)); };
  out.close = [conn](uint16_t code, std::string reason) mutable { conn.close(code, std::move(reason)); };
  return out;
}

WebSocketCallbacks callbacks_of(std::shared_ptr<realtime::Session> session) {
  WebSocketCallbacks cb;
  cb.on_message = [session](std::string_view message, bool binary) { session->on_message(message, binary); };
  cb.on_close = [session] { session->on_close(); };
  return cb;
}

// A query problem before any session exists: an error message, then close 1008.
WebSocketCallbacks refuse(WebSocketConn conn, const ApiError& e) {
  conn.send_text(dump({{"type", "error"},
                       {"error",
                        {{"type", e.type},
                         {"code", null_if_empty(e.code)},
                         {"message", e.message},
                         {"param", null_if_empty(e.param)}}}}));
  conn.close(kClosePolicy, "invalid request");
  return {};
}

WebSocketCallbacks open_realtime(pipelines::transcribe::AsrServices* asr, const Request& request, WebSocketConn conn) {
  const std::string intent = query_value(request, "intent");
  if (!intent.empty() && intent != "transcription") {
    return refuse(conn, invalid_field("intent",
                                      "only 'transcription' is served: connect to "
                                      "/v1/realtime?intent=transcription."));
  }
  realtime::SessionParams params;
  params.protocol = realtime::Protocol::realtime;
  params.model = query_value(request, "model");
  params.request_id = conn.request_id();
  return callbacks_of(realtime::Session::start(std::move(params), lookup_in(asr), output_of(conn)));
}

WebSocketCallbacks open_binary(pipelines::transcribe::AsrServices* asr, const Request& request, WebSocketConn conn) {
  realtime::SessionParams params;
  params.protocol = realtime::Protocol::binary;
  params.model = query_value(request, "model");
  params.sample_rate = media::kSpeechSampleRate;
  params.request_id = conn.request_id();
  if (const std::string rate = query_value(request, "sample_rate"); !rate.empty()) {
    char* end = nullptr;
    const long v = std::strtol(rate.c_str(), &end, 10);
    if (end != rate.c_str() + rate.size() || v < kMinSampleRate || v > kMaxSampleRate)
      return refuse(conn, invalid_field("sample_rate", "must be an integer between 8000 and 48000."));
    params.sample_rate = static_cast<int>(v);
  }
  if (const std::string language = query_value(request, "language"); !language.empty()) params.language = language;
  params.prompt = query_value(request, "prompt");
  const std::string vad = query_value(request, "vad");
  if (vad == "none") {
    params.server_vad = false;
  } else if (!vad.empty() && vad != "server") {
    return refuse(conn, invalid_field("vad", "must be 'server' (the default) or 'none'."));
  }
  return callbacks_of(realtime::Session::start(std::move(params), lookup_in(asr), output_of(conn)));
}

}  // namespace

void add_realtime_routes(Router& router, pipelines::transcribe::AsrServices& asr) {
  pipelines::transcribe::AsrServices* services = &asr;
  router.add_websocket("/v1/realtime", [services](const Request& request, WebSocketConn conn) {
    return open_realtime(services, request, std::move(conn));
  });
  router.add_websocket("/v1/audio/stream", [services](const Request& request, WebSocketConn conn) {
    return open_binary(services, request, std::move(conn));
  });
}

}  // namespace prism::api

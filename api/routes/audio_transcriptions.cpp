// api/routes/audio_transcriptions.cpp: POST /v1/audio/transcriptions and /translations. The
// handler reads the form and checks it against the deployment on the I/O thread; an AudioCall
// then lives until the transcription ends: it is a job of the server's job pool
// (pipelines/job_pool.h), whose worker decodes the audio and starts the Transcription (the VAD
// deployment is asked there, log-mel computed), the engine's thread delivers segments and the
// end (which ends the job), and the client's disconnect cancels it.
#include "api/routes/audio_transcriptions.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "api/multipart.h"
#include "api/routes/deployment_call.h"
#include "api/sse.h"
#include "base/log.h"
#include "frontends/generate_frontend.h"
#include "pipelines/transcribe/transcription.h"
#include "media/audio.h"

namespace prism::api {

namespace {

using frontends::SpeechTask;
using pipelines::transcribe::AsrService;
using pipelines::transcribe::Transcript;
using pipelines::transcribe::Transcription;

constexpr std::string_view kTask = "transcribe";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

ApiError missing(std::string_view field) {
  ApiError e = invalid_field(field, "this field is required.");
  e.message = "Missing required parameter: '" + std::string(field) + "'.";
  e.code = "missing_required_parameter";
  return e;
}

std::optional<bool> parse_bool(std::string_view value) {
  const std::string v = lowercase(trim(value));
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  return std::nullopt;
}

// The prism extension field: a JSON object of Prism options.
std::optional<ApiError> read_prism_options(std::string_view value, AudioRequest& out) {
  const nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_field("prism", "must be a JSON object such as {\"temperature_fallback\": false}.");
  for (const auto& [key, v] : j.items()) {
    if (key != "temperature_fallback")
      return invalid_field("prism." + key, "is not a Prism option of this route (known: temperature_fallback).");
    if (!v.is_boolean()) return invalid_field("prism." + key, std::string("expected a boolean, got ") + json_type_name(v) + ".");
    out.temperature_fallback = v.get<bool>();
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_audio_request(std::string_view content_type, std::string_view body, SpeechTask task,
                                           AudioRequest& out) {
  const bool translate = task == SpeechTask::translate;
  out = AudioRequest{};
  out.task = task;
  if (!lowercase(trim(content_type)).starts_with("multipart/form-data"))
    return bad_request("The request body must be multipart/form-data with the audio in a 'file' field (got Content-Type '" +
                           std::string(trim(content_type)) + "').",
                       "invalid_content_type");
  Result<MultipartForm> form = parse_multipart(content_type, body);
  if (!form.has_value()) return bad_request("The multipart/form-data body is malformed: " + form.status().message() + ".");

  bool has_file = false, has_model = false;
  std::set<std::string, std::less<>> seen;  // the first part of a name wins, as MultipartForm::find
  for (MultipartPart& part : form->parts) {
    const std::string& name = part.name;
    const bool granularity = name == "timestamp_granularities[]" || name == "timestamp_granularities";
    if (!granularity && !seen.insert(name).second) continue;
    const std::string_view value = trim(part.data);
    if (name == "file") {
      has_file = true;
      out.file_name = part.filename;
      out.file = std::move(part.data);
    } else if (name == "model") {
      if (value.empty()) return invalid_field("model", "expected the name of a model, got an empty string.");
      has_model = true;
      out.model = std::string(value);
    } else if (name == "language") {
      if (value.empty()) continue;  // an empty field is an absent one (forms send them)
      if (translate)
        return invalid_field("language", "translations take no language: the spoken language is detected and the "
                                         "output is English. Use /v1/audio/transcriptions to transcribe in a given language.");
      out.language = std::string(value);
    } else if (name == "prompt") {
      out.prompt = part.data;
    } else if (name == "temperature") {
      if (value.empty()) continue;
      double t = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), t);
      if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(t) || t < 0 || t > 1)
        return invalid_field("temperature", "must be a number between 0 and 1, got '" + std::string(value) + "'.");
      out.temperature = float(t);
    } else if (name == "response_format") {
      if (value.empty()) continue;
      const std::optional<TranscriptFormat> f = parse_transcript_format(value);
      if (!f)
        return invalid_field("response_format", "must be one of 'json', 'text', 'srt', 'verbose_json', 'vtt', got '" +
                                                    std::string(value) + "'.");
      out.format = *f;
    } else if (granularity) {
      if (value == "segment") continue;
      if (value == "word")
        return invalid_field(name, "word timestamps are not supported by this server; only 'segment' is.");
      return invalid_field(name, "must be 'segment' (or 'word', not supported here), got '" + std::string(value) + "'.");
    } else if (name == "stream") {
      const std::optional<bool> b = parse_bool(value);
      if (!b) return invalid_field("stream", "must be true or false, got '" + std::string(value) + "'.");
      out.stream = *b;
    } else if (name == "prism") {
      if (auto e = read_prism_options(value, out)) return e;
    }
    // Other fields (user, chunking_strategy, include[] ...) are accepted and ignored.
  }
  if (!has_file) return missing("file");
  if (!has_model) return missing("model");
  return std::nullopt;
}

std::string response_language_name(SpeechTask task, std::string_view code, bool multilingual) {
  if (task == SpeechTask::translate || !multilingual) return "english";
  return code.empty() ? std::string() : language_name(code);
}

namespace {

// One request, from the job thread to the end of its transcription.
class AudioCall : public std::enable_shared_from_this<AudioCall> {
 public:
  AudioCall(AudioRequest request, std::shared_ptr<AsrService> service, Responder responder)
      : request_(std::move(request)), service_(std::move(service)), responder_(std::move(responder)) {}

  // I/O thread, before the job starts.
  void link_cancellation() {
    std::weak_ptr<AudioCall> weak = weak_from_this();
    responder_.on_cancel([weak] {
      if (auto call = weak.lock()) call->cancel();
    });
  }

  // The job's worker: decode, then start the transcription, which ends the job when it ends.
  // (The pool's workers run OpenMP regions, the log-mel's, with a team of one.)
  Status run(const std::shared_ptr<pipelines::Job>& job) {
    std::weak_ptr<AudioCall> weak = weak_from_this();
    job->on_cancel([weak] {
      if (auto call = weak.lock()) call->cancel();
    });
    if (is_cancelled()) return cancelled_error("the client left before the audio was decoded");
    const pipelines::transcribe::TranscriptionContext& context = service_->context;
    media::AudioLimits limits;
    limits.max_seconds = context.settings.max_audio_seconds;
    Result<media::Audio> audio = media::decode_audio(
        std::span(reinterpret_cast<const uint8_t*>(request_.file.data()), request_.file.size()), limits);
    std::string().swap(request_.file);
    if (!audio.has_value()) {
      if (audio.status().code() == StatusCode::internal) {
        PRISM_LOG_ERROR("request {}: decoding the audio failed: {}", responder_.request_id(), audio.status().message());
        responder_.send(error_response(server_error()));
        return audio.status();
      }
      ApiError e = bad_request("file " + audio.status().message(), "invalid_file");
      e.param = "file";
      responder_.send(error_response(e));
      return audio.status();
    }
    if (is_cancelled()) return cancelled_error("the client left while the audio was decoded");

    pipelines::transcribe::TranscribeOptions options;
    options.task = request_.task;
    options.language = request_.language;
    options.prompt = request_.prompt;
    options.temperature = request_.temperature;
    options.temperature_fallback = request_.temperature_fallback;
    pipelines::transcribe::TranscriptionEvents events;
    std::shared_ptr<AudioCall> self = shared_from_this();
    if (request_.streams()) events.on_segment = [self](const pipelines::transcribe::Segment& s) { self->on_segment(s); };
    events.on_progress = [job](int done, int total) { job->set_progress(done, total); };
    events.on_done = [self, job](Result<Transcript> t) {
      job->finish(t.has_value() ? Status() : t.status());
      self->on_done(std::move(t));
    };
    job->finish_later();
    std::shared_ptr<Transcription> t =
        Transcription::start(context, std::move(audio->samples), std::move(options), std::move(events));
    bool cancel_now = false;
    {
      std::lock_guard lock(mu_);
      // NOTE: weak: the transcription's running chunk requests keep it alive until it ends,
      // and it holds this call (its events): a strong pointer here would be a cycle.
      transcription_ = t;
      cancel_now = cancelled_;
    }
    if (cancel_now) t->cancel();
    return Status();
  }

 private:
  bool is_cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  void cancel() {
    std::shared_ptr<Transcription> t;
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
      t = transcription_.lock();
    }
    if (t) t->cancel();
  }

  // Engine thread (or the job thread). Segments come final and in time order.
  void on_segment(const pipelines::transcribe::Segment& segment) {
    bool gone = false;
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      std::string_view text = segment.text;
      if (!sent_text_) text = trim(text);  // the deltas join into the done event's (trimmed) text
      if (text.empty()) return;
      sent_text_ = true;
      gone = !write_locked(transcript_delta_event(text));
    }
    if (gone) cancel();
  }

  void on_done(Result<Transcript> result) {
    std::lock_guard lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (!result.has_value()) {
      const Status& s = result.status();
      if (s.code() == StatusCode::cancelled) {
        if (stream_started_) writer_.close();
        return;  // nobody is listening
      }
      if (s.code() == StatusCode::internal)
        PRISM_LOG_ERROR("request {}: the transcription failed: {}", responder_.request_id(), s.message());
      const ApiError error = completion_error(s);
      if (!stream_started_) {
        responder_.send(error_response(error));
        return;
      }
      writer_.write(sse_event(error_json(error)));
      writer_.write(std::string(sse_done()));
      writer_.close();
      return;
    }
    const Transcript& transcript = result.value();
    if (request_.streams()) {
      write_locked(transcript_done_event(transcript));
      writer_.write(std::string(sse_done()));
      writer_.close();
      return;
    }
    TranscriptRendering rendering;
    rendering.task = request_.task;
    rendering.language_name = response_language_name(request_.task, transcript.language,
                                                     service_->context.frontend->speech()->multilingual());
    Response response;
    response.status = 200;
    response.content_type = std::string(transcript_content_type(request_.format));
    response.body = render_transcript(transcript, request_.format, rendering);
    responder_.send(std::move(response));
  }

  // Starts the event stream on the first event. False when the client is gone.
  bool write_locked(const std::string& event) {
    if (!stream_started_) {
      stream_started_ = true;
      writer_ = start_sse(responder_);
    }
    return writer_.write(sse_event(event));
  }

  AudioRequest request_;  // job thread until the transcription starts, then read-only
  const std::shared_ptr<AsrService> service_;
  Responder responder_;

  std::mutex mu_;  // guards what follows
  std::weak_ptr<Transcription> transcription_;
  bool cancelled_ = false;
  bool finished_ = false;
  bool stream_started_ = false;
  bool sent_text_ = false;
  StreamWriter writer_;
};

// The service of the request's model, or the client's error.
Result<std::shared_ptr<AsrService>> find_service(serving::DeploymentSet& deployments,
                                                 pipelines::transcribe::AsrServices& asr, const AudioRequest& request,
                                                 const Request& http, ApiError& error) {
  Result<serving::Deployment*> d = find_deployment(deployments, request.model, kTask, error);
  if (!d.has_value()) return d.status();
  Result<std::shared_ptr<AsrService>> service = asr.find(request.model);
  if (!service.has_value()) {
    const Status& s = service.status();
    if (s.code() == StatusCode::unavailable) {
      error = not_ready("The model '" + request.model + "' is not ready yet.");
    } else if (s.code() == StatusCode::not_found) {
      error = model_not_found(request.model);
    } else {
      // A transcribe deployment that cannot serve speech: the server's configuration, not the
      // request (the message may name files): logged, and a generic 500.
      PRISM_LOG_ERROR("request {}: the model '{}' cannot transcribe: {}", http.request_id, request.model, s.message());
      error = server_error();
    }
    return s;
  }
  return service;
}

void post_audio(serving::DeploymentSet& deployments, pipelines::transcribe::AsrServices& asr, pipelines::JobPool& jobs,
                SpeechTask task, const Request& http, Responder responder) {
  AudioRequest request;
  if (auto e = read_audio_request(http.header("Content-Type"), http.body, task, request))
    return (void)responder.send(error_response(*e));
  ApiError error;
  Result<std::shared_ptr<AsrService>> service = find_service(deployments, asr, request, http, error);
  if (!service.has_value()) return (void)responder.send(error_response(error));
  const frontends::SpeechProcessor* speech = (*service)->context.frontend->speech();
  if (task == SpeechTask::translate && !speech->multilingual())
    return (void)responder.send(error_response(invalid_field(
        "model", "the model '" + request.model + "' is English-only: it cannot translate (a multilingual model can).")));
  if (request.language) {
    Result<std::string> code = speech->check_language(*request.language);
    if (!code.has_value()) return (void)responder.send(error_response(invalid_field("language", code.status().message() + ".")));
    request.language = std::move(code).value();
  }

  auto call = std::make_shared<AudioCall>(std::move(request), std::move(service).value(), responder);
  call->link_cancellation();
  Result<std::shared_ptr<pipelines::Job>> job =
      jobs.submit("transcription", [call](const std::shared_ptr<pipelines::Job>& j) { return call->run(j); });
  if (!job.has_value()) responder.send(error_response(overloaded(1, "Transcription")));
}

}  // namespace

void add_audio_routes(Router& router, serving::DeploymentSet& deployments, pipelines::transcribe::AsrServices& asr,
                      pipelines::JobPool& jobs) {
  serving::DeploymentSet* set = &deployments;
  pipelines::transcribe::AsrServices* services = &asr;
  pipelines::JobPool* pool = &jobs;
  router.add("POST", "/v1/audio/transcriptions", [set, services, pool](const Request& request, Responder responder) {
    post_audio(*set, *services, *pool, SpeechTask::transcribe, request, std::move(responder));
  });
  router.add("POST", "/v1/audio/translations", [set, services, pool](const Request& request, Responder responder) {
    post_audio(*set, *services, *pool, SpeechTask::translate, request, std::move(responder));
  });
}

}  // namespace prism::api

// api/routes/audio_transcriptions.h: OpenAI's speech-to-text routes for deployments of task
// "transcribe" (pipelines/transcribe: VAD, chunks decoded in parallel, quality re-runs, stitching).
//   POST /v1/audio/transcriptions   multipart/form-data:
//     file (required: the audio; WAV, FLAC, OGG, MP3, M4A, WebM ...), model (required),
//     language (ISO-639-1 "en", or a Whisper name "english"; default: detected), prompt,
//     temperature (0..1; 0 = greedy with whisper's fallback ladder), response_format
//     (json | text | srt | vtt | verbose_json; default json), timestamp_granularities[]
//     ("segment"; "word" is refused: no word timestamps), stream ("true": Server-Sent Events
//     {"type": "transcript.text.delta", "delta"} per final segment, in time order, then
//     {"type": "transcript.text.done", "text", "usage"} and "data: [DONE]"), and the Prism
//     extension prism = a JSON object {"temperature_fallback": false} (one decode per chunk at
//     `temperature`, whatever whisper's checks say: reproducible output).
//   POST /v1/audio/translations     the same with the task "translate" (English text out);
//     `language` is refused (the output is English), a model without the translate task (an
//     English-only one) is a 400 naming `model`.
//   Responses: json {"text", "usage": {"type": "duration", "seconds"}}; verbose_json; text,
//   srt and vtt as text/plain (api/routes/transcript_format.h).
// stream: as OpenAI's gpt-4o-transcribe, only json and text stream; with srt, vtt or
// verbose_json it is ignored (as OpenAI ignores it for whisper-1) and the whole response comes
// at the end. Translations stream the same way (a Prism extension: OpenAI's translations have
// no stream parameter).
// Errors (OpenAI's JSON, with param): no file → 400 "file"; audio that cannot be decoded, is
// empty, corrupt or longer than the deployment's max_audio_seconds → 400 "file" with the media
// layer's reason; unknown language → 400 "language"; bad temperature, response_format,
// timestamp_granularities[], stream, prism → 400 naming it; a model of another task → 400
// "model"; no such model → 404; more uploads waiting for the job pool than it queues → 429
// with Retry-After.
// Threads: the form is parsed and checked on the I/O thread; each request is then a job of
// the server's job pool (pipelines/job_pool.h; [server.limits] num_job_threads workers, each
// single-threaded (no second compute pool), max_job_queue waiting): its worker decodes the
// audio (a 25 MB file takes a while), has the VAD cut it and computes the log-mel features,
// then hands the chunks to the engine and is free again. Events come back on the engine's
// thread; the job ends with the transcription. A client that disconnects (or a request past
// its deadline) cancels it.
// Must not: block an I/O thread on decoding, or touch tensors.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "api/errors.h"
#include "api/router.h"
#include "api/routes/transcript_format.h"
#include "pipelines/transcribe/asr_service.h"
#include "serving/deployment_set.h"
#include "pipelines/job_pool.h"

namespace prism::api {

// `deployments`, `asr` and `jobs` are not owned. A job uses its deployment and ASR service:
// destroy the server, then the pool (it runs what is queued and joins), then `asr` and
// `deployments`.
void add_audio_routes(Router& router, serving::DeploymentSet& deployments, pipelines::transcribe::AsrServices& asr,
                      pipelines::JobPool& jobs);

// ---- the route's pure steps, exposed for tests ----

// A request's form, read and checked (values only: model, language and audio are checked
// against the deployment later).
struct AudioRequest {
  frontends::SpeechTask task = frontends::SpeechTask::transcribe;
  std::string model;
  std::string file_name;  // as uploaded (may be empty)
  std::string file;       // the audio's bytes
  std::optional<std::string> language;
  std::string prompt;
  float temperature = 0.0f;
  TranscriptFormat format = TranscriptFormat::json;
  bool stream = false;  // the client asked for it (see streams())
  bool temperature_fallback = true;

  // Whether the response is an event stream: stream asked and a format that streams.
  bool streams() const { return stream && (format == TranscriptFormat::json || format == TranscriptFormat::text); }
};

// Reads the multipart body of /v1/audio/transcriptions (task transcribe) or
// /v1/audio/translations (translate). On failure returns the client's error.
std::optional<ApiError> read_audio_request(std::string_view content_type, std::string_view body,
                                           frontends::SpeechTask task, AudioRequest& out);

// verbose_json's language: "english" for translations and English-only models' transcripts,
// else the name of the transcript's language code ("" when unknown).
std::string response_language_name(frontends::SpeechTask task, std::string_view code, bool multilingual);

}  // namespace prism::api

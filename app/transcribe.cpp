// app/transcribe.cpp: `prism transcribe`. The calling thread checks the options, reads and
// decodes the file (before the model loads: a bad file fails fast), starts the deployment and
// the transcription, then waits, redrawing the progress line; the engine's thread reports
// progress and the end through atomics and a condition variable.
#include "app/transcribe.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>

#include "api/routes/audio_transcriptions.h"
#include "api/routes/transcript_format.h"
#include "app/demo.h"
#include "app/engines.h"
#include "app/progress.h"
#include "base/file.h"
#include "frontends/speech_processor.h"
#include "pipelines/transcribe/asr_service.h"
#include "pipelines/transcribe/voice_activity.h"
#include "pipelines/transcribe/transcription.h"
#include "media/audio.h"
#include "serving/deployment_set.h"
#include "serving/metrics.h"
#include "tools/demo/demo.h"

namespace prism::app {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using frontends::SpeechTask;
using pipelines::transcribe::Transcript;

constexpr const char* kDemoAsr = "demo-asr";

int fail(const std::string& message) {
  std::fprintf(stderr, "prism transcribe: %s\n", message.c_str());
  return 1;
}

std::string one_decimal(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Redraws the progress line: at most every 0.2 s on a terminal, every 10 s otherwise.
class ProgressLine {
 public:
  ProgressLine(double audio_seconds, bool enabled)
      : audio_seconds_(audio_seconds), enabled_(enabled), tty_(enabled && ::isatty(STDERR_FILENO) == 1) {}
  void update(int done, int total, bool final) {
    if (!enabled_ || total <= 0) return;
    const Clock::time_point now = Clock::now();
    if (!final && std::chrono::duration<double>(now - last_).count() < (tty_ ? 0.2 : 10.0)) return;
    last_ = now;
    const TranscribeProgress p{done, total, audio_seconds_, std::chrono::duration<double>(now - start_).count()};
    if (tty_)
      std::fprintf(stderr, "\r\033[Kprism transcribe: %s%s", format_transcribe_progress(p, 30).c_str(), final ? "\n" : "");
    else
      std::fprintf(stderr, "prism transcribe: %s\n", format_transcribe_progress(p, 0).c_str());
    std::fflush(stderr);
  }

 private:
  const double audio_seconds_;
  const bool enabled_, tty_;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point last_ = start_;
};

// The end of a transcription, handed from the engine's thread to the waiting one.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Transcript>> result;
  std::atomic<int> done_chunks{0}, total_chunks{0};
};

}  // namespace

CLI::App* add_transcribe_command(CLI::App& app, TranscribeCommandOptions& o) {
  auto* cmd = app.add_subcommand("transcribe", "Transcribe (or translate) one audio file with a Whisper model");
  cmd->add_option("FILE", o.file, "Audio file: WAV, FLAC, OGG, MP3, M4A, WebM ...")->required();
  cmd->add_option("--model", o.model, "Hugging Face Whisper directory (default: the demo set's demo-asr)");
  cmd->add_option("--format", o.format, "Output format: json, text, srt, vtt or verbose_json (default text)")
      ->check(CLI::IsMember({"json", "text", "srt", "vtt", "verbose_json"}));
  cmd->add_option("--language", o.language, "Spoken language, ISO 639-1 ('en') or name (default: detected)");
  cmd->add_option("--task", o.task, "transcribe (default) or translate (to English)")
      ->check(CLI::IsMember({"transcribe", "translate"}));
  cmd->add_option("--prompt", o.prompt, "Text conditioning the first chunk (names, spelling, style)");
  cmd->add_option("--temperature", o.temperature, "Sampling temperature 0..1 (0: greedy, then whisper's fallback)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--output", o.output, "Write the transcript to this file instead of stdout");
  cmd->add_option("--vad", o.vad, "Voice activity detector: energy (built in) or silero (needs --vad-model)")
      ->check(CLI::IsMember({"energy", "silero"}));
  cmd->add_option("--vad-model", o.vad_model, "Silero VAD model file (silero_vad.onnx)");
  cmd->add_flag("--sequential", o.sequential,
                "Decode chunk after chunk, each conditioned on the text before it (default: all chunks in parallel)");
  cmd->add_flag("!--no-fallback", o.temperature_fallback,
                "One decode per chunk at --temperature, without whisper's temperature fallback");
  cmd->add_flag("!--no-progress", o.progress, "No progress on stderr");
  return cmd;
}

Result<serving::DeploymentConfig> transcribe_deployment(const TranscribeCommandOptions& o) {
  serving::DeploymentConfig d;
  if (o.model.empty()) {
    PRISM_ASSIGN_OR_RETURN(d, demo_deployment(o.demo_dir, kDemoAsr, "speech model", "a Hugging Face Whisper directory"));
  } else {
    if (!fs::is_directory(o.model)) return not_found("no such model directory '" + o.model + "'");
    const fs::path path = fs::path(o.model).lexically_normal();
    const std::string name = (path.has_filename() ? path.filename() : path.parent_path().filename()).string();
    d.name = name.empty() ? "transcribe" : name;
    d.task = "transcribe";
    d.model = o.model;
  }
  d.timeout_ms = 0;  // a long file's chunks may wait their turn as long as it takes
  if (!o.vad.empty()) d.knobs.set("vad", o.vad, "--vad");
  if (!o.vad_model.empty()) {
    d.knobs.set("vad_model", o.vad_model, "--vad-model");
    if (o.vad.empty()) d.knobs.set("vad", std::string("silero"), "--vad-model");
  }
  if (o.sequential) d.knobs.set("asr_parallel_chunks", false, "--sequential");
  if (Status s = d.validate(); !s.ok()) return invalid_argument(s.message());
  return d;
}

std::string format_transcribe_progress(const TranscribeProgress& p, int bar_width) {
  const double fraction = p.total_chunks > 0 ? std::clamp(double(p.done_chunks) / p.total_chunks, 0.0, 1.0) : 1.0;
  const double audio_done = fraction * p.audio_seconds;
  std::string rate = "-", eta = "-";
  if (p.elapsed_s > 0 && p.done_chunks > 0) {
    rate = one_decimal(audio_done / p.elapsed_s);
    eta = format_duration(p.elapsed_s * double(p.total_chunks - p.done_chunks) / p.done_chunks);
  }
  const std::string chunks = std::to_string(p.done_chunks) + "/" + std::to_string(p.total_chunks) + " chunks";
  const std::string audio = one_decimal(audio_done) + " of " + one_decimal(p.audio_seconds) + " s";
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * fraction);
  if (bar_width <= 0)
    return chunks + " (" + pct + "), " + audio + " of audio, " + rate + " audio s/s, ETA " + eta;
  const int filled = int(fraction * bar_width);
  std::string line(1, '[');
  line.append(size_t(filled), '#').append(size_t(bar_width - filled), '.');
  return line + "]  " + chunks + "  " + audio + "  " + rate + " s/s  ETA " + eta;
}

int run_transcribe(const TranscribeCommandOptions& o) {
  // Everything but the transcript goes to stderr; the deployment's lifecycle lines are noise here.
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::warn);

  const std::optional<api::TranscriptFormat> format = api::parse_transcript_format(o.format);
  if (!format) return fail("--format must be json, text, srt, vtt or verbose_json, got '" + o.format + "'");
  if (o.task != "transcribe" && o.task != "translate")
    return fail("--task must be transcribe or translate, got '" + o.task + "'");
  const SpeechTask task = o.task == "translate" ? SpeechTask::translate : SpeechTask::transcribe;
  if (task == SpeechTask::translate && !o.language.empty())
    return fail("--language applies to --task transcribe only: a translation detects the spoken language");
  if (!(o.temperature >= 0 && o.temperature <= 1)) return fail("--temperature must be between 0 and 1");

  Result<serving::DeploymentConfig> config = transcribe_deployment(o);
  if (!config.has_value()) return fail(config.status().message());
  Result<pipelines::transcribe::TranscribeSettings> settings =
      pipelines::transcribe::TranscribeSettings::from_knobs(config->knobs);
  if (!settings.has_value()) return fail(settings.status().message());

  // The file first: a bad one fails before the model loads.
  Result<std::string> bytes = read_file(o.file);
  if (!bytes.has_value()) return fail(bytes.status().message());
  media::AudioLimits limits;
  limits.max_seconds = settings->max_audio_seconds;
  Result<media::Audio> audio =
      media::decode_audio(std::span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), limits);
  if (!audio.has_value()) return fail(o.file + " " + audio.status().message());
  std::string().swap(*bytes);
  const double seconds = audio->seconds();

  // The model's deployment, and the "vad" deployment of its Silero file, if any.
  serving::Config set_config;
  set_config.deployments.push_back(*config);
  if (Status s = pipelines::transcribe::add_vad_deployments(set_config); !s.ok()) return fail(s.message());
  serving::MetricsRegistry metrics;
  const serving::EngineFactories engines = make_engines();
  serving::DeploymentSet deployments(metrics);
  if (Status s = deployments.add_all(set_config, engines); !s.ok()) return fail(s.message());
  deployments.start_all();
  if (Status s = deployments.wait_ready(); !s.ok()) return fail("cannot load the model " + config->model + ": " + s.message());

  Outcome outcome;
  bool multilingual = true;
  {
    // NOTE: the services (and their transcription contexts) go before the deployments stop.
    pipelines::transcribe::AsrServices asr(deployments);
    Result<std::shared_ptr<pipelines::transcribe::AsrService>> service = asr.find(config->name);
    if (!service.has_value()) return fail(service.status().message());
    const frontends::SpeechProcessor* speech = (*service)->context.frontend->speech();
    multilingual = speech->multilingual();
    if (task == SpeechTask::translate && !speech->multilingual())
      return fail("the model " + config->model + " is English-only: it cannot translate");
    pipelines::transcribe::TranscribeOptions options;
    options.task = task;
    if (!o.language.empty()) {
      Result<std::string> code = speech->check_language(o.language);
      if (!code.has_value()) return fail("--language: " + code.status().message());
      options.language = std::move(code).value();
    }
    options.prompt = o.prompt;
    options.temperature = float(o.temperature);
    options.temperature_fallback = o.temperature_fallback;

    pipelines::transcribe::TranscriptionEvents events;
    events.on_progress = [&outcome](int done, int total) {
      outcome.done_chunks.store(done);
      outcome.total_chunks.store(total);
    };
    events.on_done = [&outcome](Result<Transcript> t) {
      {
        std::lock_guard lock(outcome.mu);
        outcome.result = std::move(t);
      }
      outcome.cv.notify_all();
    };
    std::fprintf(stderr, "prism transcribe: %s (%s s of %s audio) with %s\n", o.file.c_str(),
                 one_decimal(seconds).c_str(), audio->format.c_str(), config->model.c_str());
    ProgressLine progress(seconds, o.progress);
    std::shared_ptr<pipelines::transcribe::Transcription> transcription =
        pipelines::transcribe::Transcription::start((*service)->context, std::move(audio->samples), std::move(options),
                                                  std::move(events));
    std::unique_lock lock(outcome.mu);
    while (!outcome.cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return outcome.result.has_value(); }))
      progress.update(outcome.done_chunks.load(), outcome.total_chunks.load(), false);
    progress.update(outcome.done_chunks.load(), outcome.total_chunks.load(), true);
  }
  deployments.stop_all();

  if (!outcome.result->has_value()) return fail("the transcription failed: " + outcome.result->status().message());
  const Transcript& transcript = outcome.result->value();
  api::TranscriptRendering rendering;
  rendering.task = task;
  rendering.language_name = api::response_language_name(task, transcript.language, multilingual);
  const std::string text = api::render_transcript(transcript, *format, rendering);
  if (o.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  } else if (Status s = write_file(o.output, text); !s.ok()) {
    return fail(s.message());
  }
  return 0;
}

}  // namespace prism::app

// pipelines/transcribe/transcription.cpp: the long-form orchestrator. It cuts, submits, judges,
// re-runs and stitches; the engine does the decoding (chunk_decode.h builds each request).
// It must not block the engine's thread: completions only update state and queue events,
// and every chunk's features are computed before the first submit.
#include "pipelines/transcribe/transcription.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <mutex>
#include <span>
#include <string>

#include "base/check.h"
#include "pipelines/transcribe/chunk_decode.h"
#include "pipelines/transcribe/chunk_plan.h"
#include "pipelines/transcribe/quality.h"
#include "media/audio.h"
#include "media/log_mel.h"

namespace prism::pipelines::transcribe {
namespace {

using serving::Clock;

constexpr double kSampleRate = media::kSpeechSampleRate;
constexpr double kMaxChunkSeconds = media::kWhisperChunkSeconds;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

// Whitespace at both ends dropped (the joined text of segments that each open with a space).
std::string trim(std::string s) {
  const auto is_space = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool blank(const std::string& s) { return trim(s).empty(); }

class LongFormTranscription final : public Transcription {
 public:
  LongFormTranscription(TranscriptionContext context, TranscribeOptions options, TranscriptionEvents events)
      : context_(std::move(context)), options_(std::move(options)), events_(std::move(events)) {}

  void begin(std::vector<float> samples);
  void cancel() override;

 private:
  struct ChunkState {
    Chunk chunk;
    std::shared_ptr<const std::vector<float>> features;  // released once final
    std::vector<float> temperatures;                     // still to try, ascending
    std::vector<DecodedChunk> attempts;
    // The attempt in flight, if any. Weak: the deployment owns its requests (and each one's
    // completion holds this transcription), so no cycle keeps either alive.
    std::weak_ptr<serving::Request> running;
    Clock::time_point first_submit{};
    bool final = false;
    std::vector<Segment> segments;  // once final (none when silent)
  };

  // ---- under mu_ ----
  Status validate_locked(std::span<const float> samples);
  serving::RequestPtr prepare_locked(size_t k, float temperature);
  void finalize_locked(size_t k);
  void emit_ready_locked();
  void finish_ok_locked();
  void fail_locked(Status status, std::vector<serving::RequestPtr>& to_cancel);
  void queue_locked(std::function<void()> event) { pending_.push_back(std::move(event)); }

  // ---- no lock held ----
  void on_complete(size_t k, float temperature, const std::shared_ptr<ChunkDecodeProbe>& probe,
                   Result<serving::PayloadPtr> result);
  void submit(std::vector<serving::RequestPtr> requests);
  void cancel_all(const std::vector<serving::RequestPtr>& requests);
  // Runs queued events in order, one thread at a time, with no lock held (a callback may call
  // cancel()). Whoever queues calls drain(); a thread already draining picks the events up.
  void drain();

  const TranscriptionContext context_;
  const TranscribeOptions options_;
  const TranscriptionEvents events_;
  const frontends::SpeechProcessor* speech_ = nullptr;  // context_.frontend's
  const QualityThresholds thresholds_{};
  Clock::time_point started_{};

  std::mutex mu_;  // guards everything below
  std::optional<std::string> language_;  // given (checked), or fixed by the first chunk (sequential)
  std::vector<int32_t> prompt_tokens_;   // options_.prompt encoded
  std::vector<int32_t> previous_;        // sequential: text and timestamp tokens since the last reset
  std::vector<ChunkState> chunks_;
  size_t next_submit_ = 0;  // the first chunk not submitted yet
  size_t next_emit_ = 0;    // the first chunk whose segments were not reported yet
  int num_final_ = 0;
  bool finished_ = false;  // on_done is queued: nothing else happens
  Transcript transcript_;
  std::deque<std::function<void()>> pending_;
  bool draining_ = false;
};

Status LongFormTranscription::validate_locked(std::span<const float> samples) {
  if (!context_.frontend || !context_.vad || !context_.submit)
    return failed_precondition("the transcription context lacks its frontend, VAD or submit function");
  speech_ = context_.frontend->speech();
  if (speech_ == nullptr) return invalid_argument("the model is not a speech recognition model");
  const TranscribeSettings& s = context_.settings;
  if (s.max_chunks_in_flight < 0) return invalid_argument("max_chunks_in_flight must not be negative");
  if (!(s.chunk_seconds > 0 && s.chunk_seconds <= kMaxChunkSeconds))
    return invalid_argument("asr_chunk_seconds must be in (0, 30], got " + format_seconds(s.chunk_seconds));
  const double seconds = double(samples.size()) / kSampleRate;
  if (seconds > s.max_audio_seconds)
    return invalid_argument("audio is " + format_seconds(seconds) + " s long, more than the limit of " +
                            format_seconds(s.max_audio_seconds) + " s");
  if (!std::isfinite(options_.temperature) || options_.temperature < 0 || options_.temperature > 1)
    return invalid_argument("temperature must be between 0 and 1");
  if (options_.fixed_tokens_per_chunk < 0 || options_.fixed_tokens_per_chunk > speech_->max_new_tokens())
    return invalid_argument("fixed_tokens_per_chunk must be between 0 and " + std::to_string(speech_->max_new_tokens()));
  if (options_.language) {
    PRISM_ASSIGN_OR_RETURN(std::string code, speech_->check_language(*options_.language));
    language_ = std::move(code);
  }
  if (!options_.prompt.empty()) prompt_tokens_ = speech_->encode_text(options_.prompt);
  return Status();
}

void LongFormTranscription::begin(std::vector<float> samples) {
  started_ = Clock::now();
  std::vector<serving::RequestPtr> to_submit;
  Status valid;
  {
    std::lock_guard lock(mu_);
    valid = validate_locked(samples);
  }
  // NOTE: no lock across the VAD: it waits on the "vad" deployment (Silero).
  Result<std::vector<media::SpeechSpan>> spans = valid.ok() ? context_.vad->spans(samples) : Result<std::vector<media::SpeechSpan>>(valid);
  {
    std::lock_guard lock(mu_);
    if (!spans.has_value()) {
      finished_ = true;
      queue_locked([this, s = spans.status()] { events_.on_done(s); });
    } else {
      transcript_.duration = transcript_.stats.audio_seconds = double(samples.size()) / kSampleRate;
      transcript_.language = language_.value_or("");
      for (const media::SpeechSpan& s : *spans) transcript_.stats.speech_seconds += double(s.end - s.start) / kSampleRate;
      const auto max_chunk = int64_t(std::llround(context_.settings.chunk_seconds * kSampleRate));
      for (Chunk& c : plan_chunks(*spans, max_chunk)) chunks_.emplace_back().chunk = std::move(c);
      transcript_.stats.chunks = int(chunks_.size());
      // NOTE: every chunk's log-mel is computed here, on the caller's thread, so no completion
      // (on the engine's thread) ever does heavy work; the samples are not kept.
      for (ChunkState& c : chunks_) {
        const std::span<const float> audio(samples.data() + c.chunk.start, size_t(c.chunk.end - c.chunk.start));
        media::LogMel mel = media::log_mel_spectrogram(audio, speech_->num_mel_bins(), media::kWhisperChunkSamples);
        c.features = std::make_shared<const std::vector<float>>(std::move(mel.values));
      }
      samples = {};
      if (chunks_.empty()) {
        finish_ok_locked();  // no speech: an empty transcript
      } else {
        const int window = context_.settings.max_chunks_in_flight;
        size_t first_wave = context_.settings.parallel_chunks ? chunks_.size() : 1;
        if (window > 0) first_wave = std::min(first_wave, size_t(window));
        for (; next_submit_ < first_wave; ++next_submit_)
          to_submit.push_back(prepare_locked(next_submit_, options_.temperature));
      }
    }
  }
  submit(std::move(to_submit));
  drain();
}

serving::RequestPtr LongFormTranscription::prepare_locked(size_t k, float temperature) {
  ChunkState& c = chunks_[k];
  if (c.attempts.empty()) {
    c.first_submit = Clock::now();
    if (options_.temperature_fallback) c.temperatures = fallback_after(temperature);
  }
  ChunkDecodeSpec spec;
  spec.speech.task = options_.task;
  spec.speech.language = language_;
  spec.speech.timestamps = options_.timestamps;
  spec.speech.segment_seconds = double(c.chunk.end - c.chunk.start) / kSampleRate;
  // Parallel chunks are independent (faster-whisper's batched mode): only the first sees the
  // caller's prompt. Sequential ones see what came before, as openai/whisper's transcribe().
  if (context_.settings.parallel_chunks) {
    if (k == 0) spec.speech.previous = prompt_tokens_;
  } else {
    spec.speech.previous = previous_;
  }
  spec.features = c.features;
  spec.frames = media::kWhisperChunkFrames;
  spec.temperature = temperature;
  spec.fixed_tokens = options_.fixed_tokens_per_chunk;
  ChunkDecode decode = make_chunk_decode(*context_.frontend, spec);
  const int64_t cost = std::max<int64_t>(1, int64_t(decode.input->prompt.size()));
  auto self = std::static_pointer_cast<LongFormTranscription>(shared_from_this());
  serving::RequestPtr r = serving::make_request(
      std::move(decode.input), [self, k, temperature, probe = std::move(decode.probe)](Result<serving::PayloadPtr> result) {
        self->on_complete(k, temperature, probe, std::move(result));
      });
  r->cost_tokens = cost;
  c.running = r;
  return r;
}

void LongFormTranscription::on_complete(size_t k, float temperature, const std::shared_ptr<ChunkDecodeProbe>& probe,
                                        Result<serving::PayloadPtr> result) {
  std::vector<serving::RequestPtr> to_submit, to_cancel;
  {
    std::lock_guard lock(mu_);
    ChunkState& c = chunks_[k];
    c.running.reset();
    if (finished_) return;
    const auto* output = result ? dynamic_cast<const frontends::GenerateOutput*>(result->get()) : nullptr;
    if (!result) {
      fail_locked(result.status(), to_cancel);
    } else if (output == nullptr || output->choices.empty()) {
      fail_locked(internal_error("the engine answered a chunk with no choice"), to_cancel);
    } else {
      DecodedChunk d = read_chunk_decode(*speech_, *output, *probe, temperature, thresholds_);
      transcript_.stats.decoded_tokens += d.decoded_tokens;
      const bool retry = d.verdict == Verdict::failed && !c.temperatures.empty();
      c.attempts.push_back(std::move(d));
      if (retry) {
        if (c.attempts.size() == 1) {
          ++transcript_.stats.rerun_chunks;
          if (context_.metrics) context_.metrics->rerun_chunks.inc();
        }
        const float next = c.temperatures.front();
        c.temperatures.erase(c.temperatures.begin());
        to_submit.push_back(prepare_locked(k, next));
      } else {
        finalize_locked(k);
        emit_ready_locked();
        // The chunk's slot passes to the next chunk not yet submitted (sequential: k + 1).
        if (next_submit_ < chunks_.size()) {
          to_submit.push_back(prepare_locked(next_submit_, options_.temperature));
          ++next_submit_;
        }
        if (num_final_ == int(chunks_.size())) finish_ok_locked();
      }
    }
  }
  cancel_all(to_cancel);
  submit(std::move(to_submit));
  drain();
}

// NOTE: a chunk is final once an attempt passed, was silence, or the ladder ran out (then the
// best attempt stands, as in whisper). Its segments are in the original audio's time and
// inside the chunk.
void LongFormTranscription::finalize_locked(size_t k) {
  ChunkState& c = chunks_[k];
  c.final = true;
  ++num_final_;
  c.features.reset();
  const size_t chosen = c.attempts.back().verdict == Verdict::failed ? best_attempt(c.attempts, thresholds_)
                                                                      : c.attempts.size() - 1;
  const DecodedChunk& d = c.attempts[chosen];
  if (k == 0 && transcript_.language.empty()) transcript_.language = d.language;
  if (context_.metrics) {
    context_.metrics->chunks.inc();
    context_.metrics->chunk_seconds.observe(seconds_between(c.first_submit, Clock::now()));
  }
  const double chunk_start = double(c.chunk.start) / kSampleRate;
  const double chunk_end = double(c.chunk.end) / kSampleRate;
  if (d.verdict == Verdict::silence) {
    ++transcript_.stats.silent_chunks;
  } else {
    for (frontends::TimedText& t : speech_->segments(d.tokens, chunk_end - chunk_start)) {
      if (blank(t.text)) continue;
      Segment s;
      s.seek = c.chunk.start;
      s.start = std::clamp(chunk_start + t.start, chunk_start, chunk_end);
      s.end = std::clamp(chunk_start + t.end, s.start, chunk_end);
      s.text = std::move(t.text);
      s.tokens = std::move(t.tokens);
      s.temperature = d.temperature;
      s.avg_logprob = d.avg_logprob;
      s.compression_ratio = d.compression_ratio;
      s.no_speech_prob = d.no_speech_prob;
      c.segments.push_back(std::move(s));
    }
  }
  if (!context_.settings.parallel_chunks) {
    // openai/whisper: the language found first holds for the rest; the text conditions the
    // next chunk unless it was decoded above temperature 0.5 (then the context restarts).
    if (!language_ && !d.language.empty()) language_ = d.language;
    if (d.verdict != Verdict::silence)
      for (const int32_t t : d.tokens)
        if (t < speech_->eot() || t >= speech_->timestamp_begin()) previous_.push_back(t);
    if (d.temperature > 0.5f) previous_.clear();
  }
  c.attempts.clear();
  if (events_.on_progress)
    queue_locked([this, done = num_final_, total = int(chunks_.size())] { events_.on_progress(done, total); });
}

void LongFormTranscription::emit_ready_locked() {
  for (; next_emit_ < chunks_.size() && chunks_[next_emit_].final; ++next_emit_) {
    for (Segment& s : chunks_[next_emit_].segments) {
      s.id = int(transcript_.segments.size());
      transcript_.segments.push_back(s);
      if (events_.on_segment) queue_locked([this, s = std::move(s)] { events_.on_segment(s); });
    }
    chunks_[next_emit_].segments.clear();
  }
}

void LongFormTranscription::finish_ok_locked() {
  finished_ = true;
  std::string text;
  for (const Segment& s : transcript_.segments) text += s.text;
  transcript_.text = trim(std::move(text));
  if (context_.metrics && transcript_.duration > 0) {
    AsrMetrics& m = *context_.metrics;
    m.audio_seconds.inc(transcript_.duration);
    m.speech_seconds.inc(transcript_.stats.speech_seconds);
    m.real_time_factor.observe(seconds_between(started_, Clock::now()) / transcript_.duration);
    m.speech_ratio.observe(transcript_.stats.speech_seconds / transcript_.duration);
  }
  queue_locked([this, t = std::move(transcript_)]() mutable { events_.on_done(std::move(t)); });
}

void LongFormTranscription::fail_locked(Status status, std::vector<serving::RequestPtr>& to_cancel) {
  finished_ = true;
  for (ChunkState& c : chunks_) {
    if (serving::RequestPtr r = c.running.lock()) to_cancel.push_back(std::move(r));
    c.running.reset();
  }
  queue_locked([this, status = std::move(status)] { events_.on_done(status); });
}

void LongFormTranscription::cancel() {
  std::vector<serving::RequestPtr> to_cancel;
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    fail_locked(cancelled_error("the transcription was cancelled"), to_cancel);
  }
  cancel_all(to_cancel);
  drain();
}

void LongFormTranscription::submit(std::vector<serving::RequestPtr> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Status s = context_.submit(requests[i]);
    if (s.ok()) continue;
    // Not taken: its completion never runs. The transcription fails; the rest are withdrawn.
    std::vector<serving::RequestPtr> to_cancel;
    {
      std::lock_guard lock(mu_);
      for (ChunkState& c : chunks_)
        if (c.running.lock() == requests[i]) c.running.reset();
      if (!finished_) fail_locked(s, to_cancel);
    }
    // Those submitted before complete as cancelled (ignored); those after were never queued.
    cancel_all(to_cancel);
    return;
  }
}

void LongFormTranscription::cancel_all(const std::vector<serving::RequestPtr>& requests) {
  for (const serving::RequestPtr& r : requests) r->cancel();
}

void LongFormTranscription::drain() {
  std::unique_lock lock(mu_);
  if (draining_) return;
  draining_ = true;
  while (!pending_.empty()) {
    std::deque<std::function<void()>> batch;
    batch.swap(pending_);
    lock.unlock();
    for (std::function<void()>& event : batch) event();
    lock.lock();
  }
  draining_ = false;
}

}  // namespace

std::shared_ptr<Transcription> Transcription::start(TranscriptionContext context, std::vector<float> samples,
                                                    TranscribeOptions options, TranscriptionEvents events) {
  PRISM_CHECK_MSG(events.on_done != nullptr, "a transcription needs on_done");
  auto t = std::make_shared<LongFormTranscription>(std::move(context), std::move(options), std::move(events));
  t->begin(std::move(samples));
  return t;
}

// ---- settings ----

namespace {

constexpr std::string_view kChunkSeconds = "asr_chunk_seconds";
constexpr std::string_view kParallelChunks = "asr_parallel_chunks";
constexpr std::string_view kMaxAudioSeconds = "max_audio_seconds";

}  // namespace

Result<TranscribeSettings> TranscribeSettings::from_knobs(const serving::Knobs& knobs) {
  TranscribeSettings s;
  PRISM_ASSIGN_OR_RETURN(s.chunk_seconds, knobs.get_double(kChunkSeconds, s.chunk_seconds));
  if (!(s.chunk_seconds >= 1 && s.chunk_seconds <= kMaxChunkSeconds))
    return invalid_argument(knobs.where(kChunkSeconds) + " must be between 1 and 30 (seconds), got " +
                            format_seconds(s.chunk_seconds));
  PRISM_ASSIGN_OR_RETURN(s.parallel_chunks, knobs.get_bool(kParallelChunks, s.parallel_chunks));
  PRISM_ASSIGN_OR_RETURN(s.max_audio_seconds, knobs.get_double(kMaxAudioSeconds, s.max_audio_seconds));
  if (!(s.max_audio_seconds > 0 && std::isfinite(s.max_audio_seconds)))
    return invalid_argument(knobs.where(kMaxAudioSeconds) + " must be a positive number of seconds, got " +
                            format_seconds(s.max_audio_seconds));
  PRISM_ASSIGN_OR_RETURN(s.vad, VadSettings::from_knobs(knobs));
  return s;
}

std::vector<std::string> TranscribeSettings::knob_names() {
  std::vector<std::string> names = {std::string(kChunkSeconds), std::string(kParallelChunks),
                                    std::string(kMaxAudioSeconds)};
  for (std::string& n : VadSettings::knob_names()) names.push_back(std::move(n));
  return names;
}

}  // namespace prism::pipelines::transcribe

// pipelines/transcribe/live.cpp: the live scheduler (one thread per transcribe deployment) and its
// streams. A stream's state is split by thread: what append()/commit()/clear()/update() touch
// (an op queue and the samples behind it) is under the stream's mutex; the audio, VAD and
// utterance state belong to the scheduler thread alone; decode completions (engine threads)
// touch only the mutex-guarded flags and deliver events under the stream's event lock, which
// orders them.
#include "pipelines/transcribe/live.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "base/check.h"
#include "base/log.h"
#include "frontends/generate_payload.h"
#include "frontends/speech_processor.h"
#include "pipelines/transcribe/chunk_decode.h"
#include "pipelines/transcribe/quality.h"
#include "media/audio.h"
#include "media/log_mel.h"

namespace prism::pipelines::transcribe {

namespace {

using frontends::SpeechProcessor;
using serving::Clock;

constexpr int64_t kRate = media::kSpeechSampleRate;
constexpr int64_t kWindow = media::kVadWindow;
constexpr int64_t kMinCommitSamples = kRate / 10;  // OpenAI refuses to commit under 100 ms
// A stream may hold this much audio the scheduler has not processed yet; more is a flood.
constexpr double kMaxBacklogSeconds = 60.0;
// Audio taken from one stream per tick (about 2 s): bounds a tick's VAD work whatever a client
// sends, so one fast client cannot delay the others' windows.
constexpr int64_t kMaxSamplesPerTick = 64 * kWindow;
// Finals of one stream queued on the engine at once; beyond, its input waits (then floods).
constexpr size_t kMaxFinalsInFlight = 4;
// Idle audio is trimmed lazily, in steps of at least this much (no memmove per tick).
constexpr int64_t kTrimStep = kRate;

int64_t to_samples(double seconds) { return std::llround(seconds * kRate); }
double to_seconds(int64_t samples) { return double(samples) / kRate; }

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// ---- what every stream of a scheduler shares -------------------------------------------------

struct LiveShared {
  TranscriptionContext context;
  LiveSettings settings;
  const SpeechProcessor* speech = nullptr;  // the frontend's: lives as long as context.frontend
  std::function<Clock::time_point()> now;
};

// A stream's options resolved against the deployment: language code checked, VAD parameters,
// the prompt's tokens.
struct StreamConfig {
  LiveStreamOptions options;
  media::VadParams vad;
  std::vector<int32_t> prompt_tokens;
};

Status check_vad(const media::VadParams& p) {
  if (!(p.threshold > 0.0f && p.threshold < 1.0f))
    return invalid_argument("VAD threshold must be in (0, 1), got " + number(p.threshold));
  if (p.min_speech_ms < 0 || p.min_silence_ms < 0 || p.speech_pad_ms < 0)
    return invalid_argument("VAD durations must not be negative");
  if (p.min_silence_ms > 10000 || p.speech_pad_ms > 10000 || p.min_speech_ms > 10000)
    return invalid_argument("VAD durations must be at most 10000 ms");
  return Status();
}

Result<StreamConfig> configure(const LiveShared& shared, LiveStreamOptions options) {
  StreamConfig c;
  if (options.language.has_value() && !options.language->empty()) {
    PRISM_ASSIGN_OR_RETURN(std::string code, shared.speech->check_language(*options.language));
    options.language = std::move(code);
  } else {
    options.language.reset();
  }
  c.vad = options.vad.value_or(shared.context.vad->settings().params);
  PRISM_RETURN_IF_ERROR(check_vad(c.vad));
  if (!options.prompt.empty()) c.prompt_tokens = shared.speech->encode_text(options.prompt);
  c.options = std::move(options);
  return c;
}

// ---- one decode ------------------------------------------------------------------------------

class LiveStreamImpl;

struct DecodeJob {
  std::shared_ptr<LiveStreamImpl> stream;
  bool final = false;
  int64_t item = 0;
  int64_t start = 0, end = 0;          // stream samples
  ChunkDecodeSpec spec;                // features shared by a final's re-runs
  std::vector<DecodedChunk> attempts;  // a final's decodes so far
  Clock::time_point trigger{};         // partial: when the newest audio in it arrived
};

// Log-mel of a decode's audio. Finals (and windows of 30 s) are padded to 30 s as Whisper
// trains; partials keep their length (the reduced audio_ctx), zero-padded to an even number of
// frames because the encoder halves them.
void set_features(ChunkDecodeSpec& spec, std::span<const float> samples, bool final, int n_mels) {
  media::LogMel mel;
  if (final || static_cast<int64_t>(samples.size()) >= media::kWhisperChunkSamples) {
    mel = media::log_mel_spectrogram(samples, n_mels, media::kWhisperChunkSamples);
  } else {
    constexpr int64_t kPair = 2 * media::kWhisperHop;
    const int64_t n = std::max<int64_t>(kPair, (static_cast<int64_t>(samples.size()) + kPair - 1) / kPair * kPair);
    std::vector<float> padded(samples.begin(), samples.end());
    padded.resize(n, 0.0f);
    mel = media::log_mel_spectrogram(padded, n_mels, 0);
  }
  spec.frames = mel.frames;
  spec.features = std::make_shared<const std::vector<float>>(std::move(mel.values));
}

// The final's transcript from the decode kept; segment times in the stream's seconds.
Transcript transcript_of(const DecodedChunk& d, const DecodeJob& job, const SpeechProcessor& speech) {
  Transcript t;
  t.language = d.language;
  t.duration = to_seconds(job.end - job.start);
  t.stats.audio_seconds = t.duration;
  t.stats.speech_seconds = t.duration;
  t.stats.chunks = 1;
  t.stats.rerun_chunks = job.attempts.size() > 1 ? 1 : 0;
  for (const DecodedChunk& a : job.attempts) t.stats.decoded_tokens += a.decoded_tokens;
  if (d.verdict == Verdict::silence) {
    t.stats.silent_chunks = 1;
    return t;
  }
  const double start_s = to_seconds(job.start), end_s = to_seconds(job.end);
  for (frontends::TimedText& piece : speech.segments(d.tokens, t.duration)) {
    Segment s;
    s.id = static_cast<int>(t.segments.size());
    s.seek = job.start;
    s.start = std::min(start_s + piece.start, end_s);
    s.end = std::clamp(start_s + piece.end, s.start, end_s);
    s.text = std::move(piece.text);
    s.tokens = std::move(piece.tokens);
    s.temperature = d.temperature;
    s.avg_logprob = d.avg_logprob;
    s.compression_ratio = d.compression_ratio;
    s.no_speech_prob = d.no_speech_prob;
    t.text += s.text;
    t.segments.push_back(std::move(s));
  }
  return t;
}

// A completed decode's reading; the engine's error, or a payload of another kind, as a Status.
Result<DecodedChunk> read_decode(Result<serving::PayloadPtr>& result, const SpeechProcessor& speech,
                                 const ChunkDecodeProbe& probe, float temperature) {
  if (!result.has_value()) return result.status();
  auto* out = dynamic_cast<frontends::GenerateOutput*>(result.value().get());
  if (out == nullptr || out->choices.empty()) return internal_error("the engine returned no choice for a live decode");
  return read_chunk_decode(speech, *out, probe, temperature);
}

// ---- a stream ----------------------------------------------------------------------------------

class LiveStreamImpl final : public LiveStream, public std::enable_shared_from_this<LiveStreamImpl> {
 public:
  LiveStreamImpl(std::shared_ptr<const LiveShared> shared, StreamConfig config, LiveStreamEvents events,
                 std::unique_ptr<VoiceActivity::Stream> vad_stream)
      : shared_(std::move(shared)),
        request_id_(config.options.request_id),
        events_(std::move(events)),
        config_(std::move(config)),
        vad_stream_(std::move(vad_stream)) {
    last_append_ = shared_->now();
    reset_endpointer();
    if (auto& m = shared_->context.metrics) m->live_streams.add(1);
  }
  ~LiveStreamImpl() override { mark_closed(); }

  // ---- LiveStream: any thread ----

  Status append(std::span<const float> samples) override {
    Status flood;
    {
      std::lock_guard lock(mu_);
      if (closed_) return failed_precondition("the live stream is closed");
      const auto n = static_cast<int64_t>(samples.size());
      const int64_t backlog = pending_samples() + unprocessed_ + n;
      if (backlog > to_samples(kMaxBacklogSeconds)) {
        flood = resource_exhausted("audio arrives faster than it can be transcribed: more than " +
                                   number(kMaxBacklogSeconds) + " s of it is waiting");
      } else {
        last_append_ = shared_->now();
        if (n > 0) {
          pending_.insert(pending_.end(), samples.begin(), samples.end());
          if (!ops_.empty() && ops_.back().kind == Op::append) {
            ops_.back().samples += n;
            ops_.back().at = last_append_;
          } else {
            ops_.push_back({Op::append, n, {}, last_append_});
          }
          appended_ += n;
        }
      }
    }
    if (!flood.ok()) {
      fail(flood);
      return flood;
    }
    return Status();
  }

  Status commit() override {
    std::lock_guard lock(mu_);
    if (closed_) return failed_precondition("the live stream is closed");
    const int64_t buffered = appended_ - std::max({item_end_, cleared_at_, commit_mark_});
    if (buffered < kMinCommitSamples) {
      return invalid_argument("buffer too small: expected at least 100 ms of audio, but the buffer has " +
                              number(std::round(to_seconds(std::max<int64_t>(buffered, 0)) * 1000.0)) + " ms");
    }
    commit_mark_ = appended_;
    ops_.push_back({Op::commit, 0, {}, shared_->now()});
    return Status();
  }

  void clear() override {
    std::lock_guard lock(mu_);
    if (closed_) return;
    cleared_at_ = appended_;
    ops_.push_back({Op::clear, 0, {}, shared_->now()});
  }

  Status update(LiveStreamOptions options) override {
    PRISM_ASSIGN_OR_RETURN(StreamConfig config, configure(*shared_, std::move(options)));
    std::lock_guard lock(mu_);
    if (closed_) return failed_precondition("the live stream is closed");
    ops_.push_back({Op::update, 0, std::move(config), shared_->now()});
    return Status();
  }

  void close() override { shut(Status()); }

  bool closed() const override {
    std::lock_guard lock(mu_);
    return closed_;
  }

  // Closes with an error event (the scheduler's verdicts: stall, flood, internal).
  void fail(const Status& error) { shut(error); }

  // ---- scheduler thread ----

  // Moves this tick's input into the stream's audio, in order, stopping after a commit or an
  // update (applied once this tick's windows are scored). False: the stream is closed.
  bool take_input(Clock::time_point now) {
    bool stalled = false;
    std::vector<Op> taken;
    std::vector<float> samples;
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      if (now - last_append_ >= std::chrono::duration<double>(shared_->settings.stall_seconds)) {
        stalled = true;
      } else if (finals_.size() < kMaxFinalsInFlight) {
        int64_t budget = kMaxSamplesPerTick;
        while (!ops_.empty()) {
          Op& op = ops_.front();
          if (op.kind == Op::append) {
            const int64_t n = std::min(op.samples, budget);
            if (n == 0) break;
            taken.push_back({Op::append, n, {}, op.at});
            samples.insert(samples.end(), pending_.begin() + pending_pos_, pending_.begin() + pending_pos_ + n);
            pending_pos_ += n;
            budget -= n;
            op.samples -= n;
            if (op.samples > 0) break;
            ops_.pop_front();
            continue;
          }
          const bool stop = op.kind != Op::clear;
          taken.push_back(std::move(op));
          ops_.pop_front();
          if (stop) break;
        }
        if (pending_pos_ > 0 && (pending_pos_ == static_cast<int64_t>(pending_.size()) || pending_pos_ >= kTrimStep)) {
          pending_.erase(pending_.begin(), pending_.begin() + pending_pos_);
          pending_pos_ = 0;
        }
      }
    }
    if (stalled) {
      fail(deadline_exceeded_error("no audio for " + number(shared_->settings.stall_seconds) +
                                   " s: the live stream stalled and was closed"));
      return false;
    }
    size_t used = 0;
    for (Op& op : taken) {
      switch (op.kind) {
        case Op::append:
          audio_.insert(audio_.end(), samples.begin() + static_cast<ptrdiff_t>(used),
                        samples.begin() + static_cast<ptrdiff_t>(used + op.samples));
          used += op.samples;
          newest_audio_at_ = op.at;
          break;
        case Op::clear:
          drop_buffer();
          break;
        case Op::commit:
          commit_requested_ = true;
          break;
        case Op::update:
          next_config_ = std::move(op.config);
          break;
      }
    }
    return true;
  }

  bool wants_window() const {
    return config_.options.server_vad && vad_stream_ != nullptr && vad_next_ + kWindow <= end();
  }
  std::span<const float> next_window() const {
    return std::span<const float>(audio_).subspan(static_cast<size_t>(vad_next_ - base_), kWindow);
  }
  VoiceActivity::Stream* vad_stream() const { return vad_stream_.get(); }

  // One scored window: advances the endpointer; speech started opens an item, speech stopped
  // finalizes it.
  void on_window(float prob, std::vector<DecodeJob>& jobs) {
    vad_next_ += kWindow;
    if (!endpointer_) return;
    std::optional<media::StreamingEndpointer::Change> change = endpointer_->push(prob);
    if (!change) return;
    const int64_t at = endpointer_origin_ + change->sample;
    if (change->event == media::StreamingEndpointer::Event::speech_started) {
      if (utterance_open_) return;
      open_item(std::clamp(at, std::max(base_, last_item_end_), end()), /*speech_events=*/true);
    } else if (utterance_open_) {
      finalize(std::clamp(at, utt_start_, end()), jobs, /*speech_events=*/true);
    }
  }

  // After the windows: commit / update, the maximum utterance, a partial when one is due, trim.
  void after_windows(std::vector<DecodeJob>& jobs) {
    const bool vad = config_.options.server_vad;
    if (!vad && !utterance_open_ && end() > std::max(base_, last_item_end_)) {
      open_item(std::max(base_, last_item_end_), false);
    }
    if (commit_requested_ || next_config_) {
      if (utterance_open_) {
        finalize(end(), jobs, vad);
      } else if (commit_requested_) {
        const int64_t from =
            std::max({base_, last_item_end_, end() - to_samples(shared_->settings.max_utterance_seconds)});
        if (end() - from >= kMinCommitSamples) {
          open_item(from, false);
          finalize(end(), jobs, false);
        }
      }
      commit_requested_ = false;
      if (next_config_) {
        config_ = std::move(*next_config_);
        next_config_.reset();
        vad_next_ = end();
      }
      reset_endpointer();
    }
    const int64_t max_samples = to_samples(shared_->settings.max_utterance_seconds);
    while (utterance_open_ && end() - utt_start_ >= max_samples) {
      const int64_t cut = utt_start_ + max_samples;
      finalize(cut, jobs, vad);
      open_item(cut, vad);  // the speech goes on in a new item
    }
    maybe_partial(jobs);
    trim();
    std::lock_guard lock(mu_);
    unprocessed_ = config_.options.server_vad ? end() - vad_next_ : 0;
  }

  // ---- decode completions: engine threads ----

  void on_decoded(DecodeJob job, const ChunkDecodeProbe& probe, Result<serving::PayloadPtr> result) {
    if (job.final) return on_final_decoded(std::move(job), probe, std::move(result));
    {
      std::lock_guard lock(mu_);
      partial_in_flight_ = false;
    }
    Result<DecodedChunk> d = read_decode(result, *shared_->speech, probe, job.spec.temperature);
    if (!d.has_value()) {
      if (d.status().code() != StatusCode::cancelled)
        PRISM_LOG_DEBUG("live {}: partial of item {} failed: {}", config_request_id(), job.item, d.status().message());
      return;
    }
    // Silence or a repetition loop: no partial this time (the final is checked and re-run).
    if (d->verdict != Verdict::ok || d->text.empty()) return;
    LivePartial partial{job.item, to_seconds(job.start), to_seconds(job.end), std::move(d->text)};
    std::lock_guard events(events_mu_);
    {
      std::lock_guard lock(mu_);
      if (closed_ || job.item < finalized_items_) return;  // its final is already under way
    }
    if (auto& m = shared_->context.metrics)
      m->live_latency.observe(std::chrono::duration<double>(shared_->now() - job.trigger).count());
    if (events_.on_partial) events_.on_partial(partial);
  }

  // Submits a decode (scheduler or engine thread). No lock held.
  void submit(DecodeJob job) {
    ChunkDecode decode = make_chunk_decode(*shared_->context.frontend, job.spec);
    const int64_t cost = static_cast<int64_t>(decode.input->prompt.size()) + decode.input->sampling.max_tokens;
    const bool final = job.final;
    const int64_t item = job.item;
    serving::RequestPtr request =
        serving::make_request(std::move(decode.input),
                              [job = std::move(job), probe = decode.probe](Result<serving::PayloadPtr> result) mutable {
                                std::shared_ptr<LiveStreamImpl> stream = job.stream;
                                stream->on_decoded(std::move(job), *probe, std::move(result));
                              });
    request->cost_tokens = cost;
    request->request_id = config_request_id();
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      std::erase_if(in_flight_, [](const std::weak_ptr<serving::Request>& w) {
        auto r = w.lock();
        return !r || r->completed();
      });
      in_flight_.push_back(request);
    }
    Status submitted = shared_->context.submit(request);
    if (submitted.ok()) return;
    // Refused (queue full, deployment stopping): the completion never runs.
    if (final) {
      deliver_final(item, submitted);
    } else {
      std::lock_guard lock(mu_);
      partial_in_flight_ = false;
    }
  }

 private:
  struct Op {
    enum Kind : uint8_t { append, commit, clear, update } kind = append;
    int64_t samples = 0;
    std::optional<StreamConfig> config;
    Clock::time_point at{};
  };
  struct FinalSlot {
    int64_t item = 0;
    std::optional<Result<Transcript>> result;
  };

  int64_t end() const { return base_ + static_cast<int64_t>(audio_.size()); }
  int64_t pending_samples() const { return static_cast<int64_t>(pending_.size()) - pending_pos_; }
  const std::string& config_request_id() const { return request_id_; }

  void reset_endpointer() {
    endpointer_.reset();
    if (!config_.options.server_vad) return;
    endpointer_.emplace(config_.vad);
    vad_next_ = std::max(vad_next_, base_);
    endpointer_origin_ = vad_next_;
  }

  void open_item(int64_t start, bool speech_events) {
    utterance_open_ = true;
    utt_start_ = start;
    partial_mark_ = start;
    item_ = next_item_++;
    if (speech_events)
      emit([&] {
        if (events_.on_speech_started) events_.on_speech_started(item_, to_seconds(start));
      });
  }

  // Ends the open item at `stop`: no more partials for it, events, its final queued.
  void finalize(int64_t stop, std::vector<DecodeJob>& jobs, bool speech_events) {
    utterance_open_ = false;
    last_item_end_ = stop;
    const int64_t item = item_;
    const int64_t start = utt_start_;
    {
      std::lock_guard lock(mu_);
      finalized_items_ = item + 1;
      item_end_ = stop;
      finals_.push_back({item, std::nullopt});
    }
    emit([&] {
      if (speech_events && events_.on_speech_stopped) events_.on_speech_stopped(item, to_seconds(stop));
      if (events_.on_committed) events_.on_committed(item, to_seconds(start), to_seconds(stop));
    });
    DecodeJob job;
    job.stream = shared_from_this();
    job.final = true;
    job.item = item;
    job.start = start;
    job.end = stop;
    set_features(job.spec, slice(start, stop), true, shared_->speech->num_mel_bins());
    job.spec.speech = decode_options(true, to_seconds(stop - start));
    jobs.push_back(std::move(job));
  }

  void maybe_partial(std::vector<DecodeJob>& jobs) {
    if (!utterance_open_) return;
    if (end() - partial_mark_ < to_samples(shared_->settings.partial_ms / 1000.0)) return;
    {
      std::lock_guard lock(mu_);
      if (partial_in_flight_) return;
      partial_in_flight_ = true;
    }
    const int64_t start = std::max(utt_start_, end() - to_samples(shared_->settings.window_seconds));
    DecodeJob job;
    job.stream = shared_from_this();
    job.item = item_;
    job.start = start;
    job.end = end();
    set_features(job.spec, slice(start, end()), false, shared_->speech->num_mel_bins());
    job.spec.speech = decode_options(false, to_seconds(end() - start));
    job.trigger = newest_audio_at_;
    partial_mark_ = end();
    jobs.push_back(std::move(job));
  }

  frontends::SpeechDecodeOptions decode_options(bool final, double seconds) const {
    frontends::SpeechDecodeOptions o;
    o.task = frontends::SpeechTask::transcribe;
    o.language = config_.options.language;
    o.timestamps = final;
    o.previous = config_.prompt_tokens;
    o.segment_seconds = std::min(seconds, double(media::kWhisperChunkSeconds));
    return o;
  }

  std::span<const float> slice(int64_t from, int64_t to) const {
    return std::span<const float>(audio_).subspan(static_cast<size_t>(from - base_), static_cast<size_t>(to - from));
  }

  // clear(): everything taken so far goes; an open item ends without events or final.
  void drop_buffer() {
    base_ = end();
    audio_.clear();
    vad_next_ = base_;
    last_item_end_ = base_;
    if (utterance_open_) {
      utterance_open_ = false;
      std::lock_guard lock(mu_);
      finalized_items_ = item_ + 1;
    }
    {
      std::lock_guard lock(mu_);
      item_end_ = std::max(item_end_, base_);
    }
    reset_endpointer();
  }

  // Drops audio no decode can still need: before the open item, else all but the last
  // max_utterance (a commit without speech takes that much), and never unscored windows.
  void trim() {
    int64_t keep = utterance_open_ ? utt_start_ : end() - to_samples(shared_->settings.max_utterance_seconds) - kWindow;
    if (config_.options.server_vad) keep = std::min(keep, vad_next_);
    keep = std::max(keep, base_);
    if (keep - base_ < kTrimStep && keep < end()) return;
    audio_.erase(audio_.begin(), audio_.begin() + static_cast<ptrdiff_t>(keep - base_));
    base_ = keep;
  }

  // NOTE: as long-form chunks: a failed decode (repetition, low logprob) is decoded again at
  // the next temperature; silence gives an empty transcript; when every temperature failed,
  // the best attempt is kept (chunk_decode.h).
  void on_final_decoded(DecodeJob job, const ChunkDecodeProbe& probe, Result<serving::PayloadPtr> result) {
    if (closed()) return;
    Result<DecodedChunk> d = read_decode(result, *shared_->speech, probe, job.spec.temperature);
    if (!d.has_value()) return deliver_final(job.item, d.status());
    job.attempts.push_back(std::move(d.value()));
    if (job.attempts.back().verdict == Verdict::failed) {
      std::vector<float> next = fallback_after(job.spec.temperature);
      if (!next.empty()) {
        job.spec.temperature = next.front();
        return submit(std::move(job));
      }
      const DecodedChunk& best = job.attempts[best_attempt(job.attempts)];
      return deliver_final(job.item, transcript_of(best, job, *shared_->speech));
    }
    deliver_final(job.item, transcript_of(job.attempts.back(), job, *shared_->speech));
  }

  // Records an item's final and delivers every final now ready, in item order.
  void deliver_final(int64_t item, Result<Transcript> result) {
    std::lock_guard events(events_mu_);
    {
      std::lock_guard lock(mu_);
      for (FinalSlot& slot : finals_)
        if (slot.item == item) slot.result = std::move(result);
    }
    while (true) {
      FinalSlot slot;
      {
        std::lock_guard lock(mu_);
        if (closed_ || finals_.empty() || !finals_.front().result.has_value()) return;
        slot = std::move(finals_.front());
        finals_.pop_front();
      }
      if (slot.result->has_value()) {
        if (events_.on_final) events_.on_final(slot.item, slot.result->value());
      } else {
        const Status& s = slot.result->status();
        PRISM_LOG_ERROR("live {}: final of item {} failed: {}", config_request_id(), slot.item, s.to_string());
        if (events_.on_final_failed) events_.on_final_failed(slot.item, s);
      }
    }
  }

  // Runs an event callback unless the stream is closed. events_mu_ orders the callbacks of
  // the threads that deliver them; it is recursive so that a callback may close the stream.
  template <class F>
  void emit(F&& f) {
    std::lock_guard events(events_mu_);
    if (closed()) return;
    f();
  }

  void shut(const Status& error) {
    std::vector<serving::RequestPtr> cancel;
    {
      std::lock_guard events(events_mu_);
      {
        std::lock_guard lock(mu_);
        if (closed_) return;
        closed_ = true;
        for (auto& w : in_flight_)
          if (auto r = w.lock()) cancel.push_back(std::move(r));
        in_flight_.clear();
        finals_.clear();
        pending_.clear();
        ops_.clear();
      }
      mark_closed();
      if (!error.ok()) {
        PRISM_LOG_INFO("live {}: closed: {}", config_request_id(), error.message());
        if (events_.on_error) events_.on_error(error);
      }
    }
    for (auto& r : cancel) r->cancel();
  }

  void mark_closed() {
    if (gauge_released_.exchange(true)) return;
    if (auto& m = shared_->context.metrics) m->live_streams.add(-1);
  }

  std::shared_ptr<const LiveShared> shared_;
  const std::string request_id_;
  LiveStreamEvents events_;
  std::recursive_mutex events_mu_;
  std::atomic<bool> gauge_released_{false};

  // ---- under mu_ (any thread) ----
  mutable std::mutex mu_;
  bool closed_ = false;
  std::deque<Op> ops_;
  std::vector<float> pending_;  // samples of the append ops from pending_pos_ on
  int64_t pending_pos_ = 0;
  int64_t appended_ = 0;  // samples ever appended (the stream's clock)
  int64_t item_end_ = 0;  // where the last item ended (the scheduler writes it)
  int64_t cleared_at_ = 0;
  int64_t commit_mark_ = 0;
  int64_t unprocessed_ = 0;  // taken but not yet scored by the VAD
  Clock::time_point last_append_;
  bool partial_in_flight_ = false;
  int64_t finalized_items_ = 0;   // items below have their final queued (or were dropped)
  std::deque<FinalSlot> finals_;  // queued finals in item order
  std::vector<std::weak_ptr<serving::Request>> in_flight_;

  // ---- scheduler thread only ----
  StreamConfig config_;
  std::unique_ptr<VoiceActivity::Stream> vad_stream_;
  std::optional<media::StreamingEndpointer> endpointer_;  // server_vad only
  int64_t endpointer_origin_ = 0;                         // stream sample of the endpointer's first window
  std::vector<float> audio_;                              // stream samples [base_, end())
  int64_t base_ = 0;
  int64_t vad_next_ = 0;  // first sample of the next window to score
  bool utterance_open_ = false;
  int64_t utt_start_ = 0;
  int64_t item_ = -1;
  int64_t next_item_ = 0;
  int64_t partial_mark_ = 0;  // end of the audio the last partial covered
  int64_t last_item_end_ = 0;
  Clock::time_point newest_audio_at_{};
  bool commit_requested_ = false;
  std::optional<StreamConfig> next_config_;
};

// ---- the scheduler -----------------------------------------------------------------------------

class LiveSchedulerImpl final : public LiveScheduler {
 public:
  LiveSchedulerImpl(std::shared_ptr<const LiveShared> shared, bool manual) : shared_(std::move(shared)) {
    if (!manual) thread_ = std::thread([this] { run(); });
  }
  ~LiveSchedulerImpl() override { stop(); }

  Result<std::shared_ptr<LiveStream>> open(LiveStreamOptions options, LiveStreamEvents events) override {
    if (shared_->speech == nullptr || shared_->context.vad == nullptr)
      return failed_precondition("live transcription needs a speech recognition deployment");
    PRISM_ASSIGN_OR_RETURN(StreamConfig config, configure(*shared_, std::move(options)));
    auto stream = std::make_shared<LiveStreamImpl>(shared_, std::move(config), std::move(events),
                                                   shared_->context.vad->new_stream());
    std::lock_guard lock(mu_);
    if (stopped_) {
      stream->close();
      return failed_precondition("the live scheduler stopped");
    }
    streams_.push_back(stream);
    return std::shared_ptr<LiveStream>(stream);
  }

  int open_streams() const override {
    std::lock_guard lock(mu_);
    return static_cast<int>(
        std::count_if(streams_.begin(), streams_.end(), [](const auto& s) { return !s->closed(); }));
  }

  media::VadParams vad_params() const override {
    return shared_->context.vad ? shared_->context.vad->settings().params : media::VadParams{};
  }
  const LiveSettings& settings() const override { return shared_->settings; }

  void tick() override {
    std::lock_guard tick_lock(tick_mu_);
    run_tick();
  }

  void stop() override {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
    std::vector<std::shared_ptr<LiveStreamImpl>> streams;
    {
      std::lock_guard lock(mu_);
      streams.swap(streams_);
    }
    for (auto& s : streams) s->close();
  }

 private:
  void run() {
    // NOTE: this thread's OpenMP regions (log-mel of small windows) stay on it: the process
    // has one compute pool, the engines'; a team of its own here would oversubscribe.
    omp_set_num_threads(1);
    const auto tick = std::chrono::milliseconds(shared_->settings.tick_ms);
    auto next = Clock::now() + tick;
    while (true) {
      {
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, next, [&] { return stopped_; });
        if (stopped_) return;
      }
      {
        std::lock_guard tick_lock(tick_mu_);
        run_tick();
      }
      next += tick;
      const auto now = Clock::now();
      if (next < now) next = now;  // after a slow tick: no burst of catch-up ticks
    }
  }

  // NOTE: one VoiceActivity::step per window index scores that window of every stream at
  // once; decodes are submitted after every stream was advanced, with no lock held, so the
  // engine sees this tick's requests of all streams together.
  void run_tick() {
    const Clock::time_point now = shared_->now();
    std::vector<std::shared_ptr<LiveStreamImpl>> streams;
    {
      std::lock_guard lock(mu_);
      std::erase_if(streams_, [](const auto& s) { return s->closed(); });
      streams = streams_;
    }
    std::vector<LiveStreamImpl*> live;
    for (auto& s : streams)
      if (s->take_input(now)) live.push_back(s.get());

    std::vector<DecodeJob> jobs;
    std::vector<std::span<const float>> windows;
    std::vector<VoiceActivity::Stream*> vad_streams;
    std::vector<LiveStreamImpl*> owners;
    while (true) {
      windows.clear();
      vad_streams.clear();
      owners.clear();
      for (LiveStreamImpl* s : live) {
        if (!s->wants_window()) continue;
        windows.push_back(s->next_window());
        vad_streams.push_back(s->vad_stream());
        owners.push_back(s);
      }
      if (owners.empty()) break;
      Result<std::vector<float>> scored = shared_->context.vad->step(windows, vad_streams);
      if (!scored.has_value()) {
        // The "vad" deployment refused or failed: these streams cannot be endpointed any more.
        for (LiveStreamImpl* s : owners) s->fail(scored.status());
        std::erase_if(live, [&](LiveStreamImpl* s) { return std::find(owners.begin(), owners.end(), s) != owners.end(); });
        continue;
      }
      const std::vector<float>& probs = *scored;
      PRISM_CHECK(probs.size() == owners.size());
      for (size_t i = 0; i < owners.size(); ++i) owners[i]->on_window(probs[i], jobs);
    }
    for (LiveStreamImpl* s : live) s->after_windows(jobs);
    for (DecodeJob& job : jobs) {
      std::shared_ptr<LiveStreamImpl> stream = job.stream;
      stream->submit(std::move(job));
    }
  }

  std::shared_ptr<const LiveShared> shared_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;                                  // mu_
  std::vector<std::shared_ptr<LiveStreamImpl>> streams_;  // mu_
  std::mutex tick_mu_;                                    // one tick at a time
  std::thread thread_;
};

// ---- knobs -------------------------------------------------------------------------------------

struct KnobRange {
  std::string_view name;
  double min, max;
  bool integer;
};
constexpr KnobRange kKnobs[] = {
    {"live_tick_ms", 1, 1000, true},
    {"live_partial_ms", 32, 10000, true},
    {"live_window_seconds", 1, 30, false},
    {"live_max_utterance_seconds", 1, 30, false},
    {"live_stall_seconds", 0.001, 86400, false},
};

Status check_range(const KnobRange& k, double v, const std::string& who) {
  if (std::isfinite(v) && v >= k.min && v <= k.max) return Status();
  return invalid_argument(who + " must be between " + number(k.min) + " and " + number(k.max) + ", got " + number(v));
}

void set_value(LiveSettings& s, std::string_view name, double v) {
  if (name == "live_tick_ms") s.tick_ms = static_cast<int>(v);
  if (name == "live_partial_ms") s.partial_ms = static_cast<int>(v);
  if (name == "live_window_seconds") s.window_seconds = v;
  if (name == "live_max_utterance_seconds") s.max_utterance_seconds = v;
  if (name == "live_stall_seconds") s.stall_seconds = v;
}

double value_of(const LiveSettings& s, std::string_view name) {
  if (name == "live_tick_ms") return s.tick_ms;
  if (name == "live_partial_ms") return s.partial_ms;
  if (name == "live_window_seconds") return s.window_seconds;
  if (name == "live_max_utterance_seconds") return s.max_utterance_seconds;
  return s.stall_seconds;
}

}  // namespace

Status LiveSettings::validate() const {
  for (const KnobRange& k : kKnobs)
    PRISM_RETURN_IF_ERROR(check_range(k, value_of(*this, k.name), "knob '" + std::string(k.name) + "'"));
  return Status();
}

Result<LiveSettings> LiveSettings::from_knobs(const serving::Knobs& knobs) {
  LiveSettings s;
  for (const KnobRange& k : kKnobs) {
    if (!knobs.has(k.name)) continue;
    double v = 0;
    if (k.integer) {
      PRISM_ASSIGN_OR_RETURN(const int64_t i, knobs.get_int(k.name, 0));
      v = static_cast<double>(i);
    } else {
      PRISM_ASSIGN_OR_RETURN(v, knobs.get_double(k.name, 0));
    }
    PRISM_RETURN_IF_ERROR(check_range(k, v, knobs.where(k.name)));
    set_value(s, k.name, v);
  }
  return s;
}

std::vector<std::string> LiveSettings::knob_names() {
  std::vector<std::string> names;
  for (const KnobRange& k : kKnobs) names.emplace_back(k.name);
  return names;
}

std::shared_ptr<LiveScheduler> LiveScheduler::create(TranscriptionContext context, LiveSettings settings,
                                                     LiveHooks hooks) {
  auto shared = std::make_shared<LiveShared>();
  shared->speech = context.frontend ? context.frontend->speech() : nullptr;
  shared->context = std::move(context);
  shared->settings = settings;
  shared->now = hooks.now ? std::move(hooks.now) : [] { return Clock::now(); };
  return std::make_shared<LiveSchedulerImpl>(std::move(shared), hooks.manual_ticks);
}

}  // namespace prism::pipelines::transcribe

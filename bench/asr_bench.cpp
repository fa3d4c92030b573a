// asr_bench: speech recognition's speed against the PyTorch peer on the same weights, every
// figure measured in one run (the machine is shared: its speed drifts minute to minute).
//
//   OMP_WAIT_POLICY=PASSIVE build/bench/asr_bench --model DIR [--precision bf16] [--modes LIST] ...
//
// DIR is a Whisper checkpoint, e.g. real-size random weights from
//   /usr/bin/python3 bench/asr_peer.py write --config whisper-base --out /tmp/whisper-base
// (bench/configs/whisper-{tiny,base}.json). docs/asr-bench.md says how to run it and what
// each figure means. Random weights never stop by themselves, so every decode runs a fixed
// number of tokens: --tokens-per-chunk (default 100 for a 30-s chunk: English speech is about
// 150 words a minute, 1.3 BPE tokens a word, so 3.3 tokens a second, timestamps included),
// and the same rate for live windows. Modes (default: all), in the order they run:
//   longform  a --minutes long recording (default 10) made of jfk.flac repeated with
//             --silence-seconds of silence between copies, transcribed as `prism serve` does
//             (pipelines/transcribe's orchestrator over a "transcribe" deployment: energy VAD →
//             chunks of <= 30 s → one engine request per chunk): sequential chunks
//             (asr_parallel_chunks = false: chunk k + 1 submitted when chunk k is done, conditioned
//             on its text, as openai/whisper's transcribe()) against parallel chunks (all in the
//             engine's continuous batch; once per --encoder-segments value, the engine's
//             max_encoder_segments); the real-time factor of each, whole and without the front
//             end (VAD + log-mel)
//   live      --streams 1,4,8 concurrent live streams (LiveScheduler), each fed 200-ms chunks of
//             the recording in real time for --live-seconds: the latency from the end of a
//             200-ms chunk (its append) to the partial result covering it, p50 and p99 (target:
//             <= 200 ms at 1 stream for whisper-base); decodes made confident (ConfidentChoice)
//             so that random weights pass whisper's checks as a trained model would
//   model     ceilings: the GEMM peak and read bandwidth measured in the run; the encoder alone
//             (30-s segments/s at batches 1, 4, 8 as a fraction of the peak) and one decoder
//             step alone at batches 1 and 8 against its bandwidth roofline (weights + every
//             sequence's cross-attention K/V + self-attention K/V read once a step)
//   peer      bench/asr_peer.py on the same weights and the same inputs (the log-mel segments
//             and prompt ids of the sequential run, captured as Prism submitted them): its
//             sequential long-form time, one live partial (the longest window of the 1-stream
//             run), and the same-weights check (the logits after chunk 0's prompt)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench/memory_bandwidth.h"
#include "engines/generate/generate_engine.h"
#include "pipelines/transcribe/live.h"
#include "pipelines/transcribe/transcription.h"
#include "pipelines/transcribe/voice_activity.h"
#include "formats/safetensors.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "frontends/logits_processor.h"
#include "frontends/speech_processor.h"
#include "media/audio.h"
#include "media/log_mel.h"
#include "models/decoder.h"
#include "models/speech_encoder.h"
#include "models/whisper/whisper.h"
#include "runtime/gemm_peak.h"
#include "runtime/threads.h"
#include "serving/config.h"
#include "serving/deployment.h"
#include "serving/metrics.h"

namespace {

namespace fs = std::filesystem;
namespace gen = prism::engines::generate;
namespace asr = prism::pipelines::transcribe;
using prism::DType;
using prism::Tensor;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double seconds_since(Clock::time_point t0) { return seconds_between(t0, Clock::now()); }

constexpr int kRate = prism::media::kSpeechSampleRate;
constexpr int kLiveChunkSamples = kRate / 5;  // 200 ms

struct Options {
  std::string model;
  std::string audio = PRISM_SOURCE_DIR "/../shared/testdata/audio/jfk.flac";
  std::string precision = "bf16";
  std::set<std::string> modes = {"longform", "live", "model", "peer"};
  double minutes = 10;
  double silence_seconds = 2;
  int tokens_per_chunk = 100;  // per 30 s of audio
  std::vector<int> streams = {1, 4, 8};
  double live_seconds = 20;
  int max_batch = 32;
  int64_t kv_cache_mib = 256;
  // Knob max_encoder_segments of each parallel long-form run (0: the engine's default); the
  // first is also the sequential run's and the live streams'.
  std::vector<int> encoder_segments = {0};
  double tokens_per_second() const { return tokens_per_chunk / 30.0; }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

int fail(const prism::Status& s) {
  std::fprintf(stderr, "asr_bench: %s\n", s.to_string().c_str());
  return 1;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

// ---- the recording ---------------------------------------------------------------------------

// `seconds` of 16 kHz audio: the clip, `silence` seconds of silence, the clip, ... cut there.
std::vector<float> looped(const std::vector<float>& clip, double silence, double seconds) {
  const size_t total = size_t(seconds * kRate);
  std::vector<float> out;
  out.reserve(total);
  while (out.size() < total) {
    out.insert(out.end(), clip.begin(), clip.end());
    out.resize(out.size() + size_t(silence * kRate), 0.0f);
  }
  out.resize(total);
  return out;
}

// ---- the deployment and its speech context -----------------------------------------------------

// NOTE: random weights are neither confident nor varied: their decodes fail whisper's checks
// (mean logprob below -1, repetition loops above a 2.4 compression ratio), and a live partial
// that fails them is not sent while a final is decoded again, hotter, up to five times. A
// trained model on speech passes them. Around the speech processor's rules (which run as they
// would), this hook makes each step's choice confident and free of loops: the best token the
// rules allow that is not among the last kRecent chosen gets +100. Each step costs the same;
// every partial is delivered and no final is re-run, as with a model that knows the speech.
class ConfidentChoice final : public prism::frontends::LogitsProcessor {
 public:
  explicit ConfidentChoice(std::unique_ptr<prism::frontends::LogitsProcessor> rules) : rules_(std::move(rules)) {}
  void process(std::span<float> logits, std::span<const int32_t> generated) override {
    rules_->process(logits, generated);
    constexpr size_t kRecent = 16;
    const std::span<const int32_t> recent = generated.last(std::min(kRecent, generated.size()));
    std::vector<std::pair<int32_t, float>> saved;
    for (int32_t t : recent)
      if (t >= 0 && size_t(t) < logits.size()) saved.emplace_back(t, logits[size_t(t)]), logits[size_t(t)] = -INFINITY;
    auto best = std::max_element(logits.begin(), logits.end());
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) logits[size_t(it->first)] = it->second;
    if (!std::isfinite(*best)) best = std::max_element(logits.begin(), logits.end());  // only recent ones allowed
    if (std::isfinite(*best)) *best += 100.0f;
  }
  int64_t probe_position() const override { return rules_->probe_position(); }
  void probe(std::span<const float> logits) override { rules_->probe(logits); }

 private:
  std::unique_ptr<prism::frontends::LogitsProcessor> rules_;
};

// Frames of a segment before its padding: whisper pads a segment with zeros, whose log-mel is
// the floor (the maximum - 8, scaled) in every bin, and speech never is.
int64_t audio_frames(const prism::frontends::AudioSegment& segment) {
  const std::vector<float>& v = *segment.features;
  const int64_t frames = segment.frames, n_mels = int64_t(v.size()) / std::max<int64_t>(frames, 1);
  const float floor = *std::min_element(v.begin(), v.end());
  for (int64_t f = frames; f-- > 0;)
    for (int64_t m = 0; m < n_mels; ++m)
      if (v[size_t(m * frames + f)] > floor + 1e-6f) return f + 1;
  return 0;
}

// What the bench's submit function does to each chunk request on its way to the deployment.
struct Submitter {
  prism::serving::Deployment* deployment = nullptr;
  std::mutex mu;
  // Live decodes: exactly tokens_per_second x their audio (a partial's features are its window;
  // a final's, its utterance padded to 30 s), end-of-text ignored, each step's choice
  // made confident (ConfidentChoice). Long-form chunks get their count from
  // TranscribeOptions::fixed_tokens_per_chunk and skip the checks (temperature_fallback off).
  bool fix_live_tokens = false;
  double tokens_per_second = 0;
  // Capture of each request's features and prompt (the peer's inputs).
  bool capture = false;
  struct Captured {
    std::shared_ptr<const std::vector<float>> features;
    int64_t frames = 0;
    std::vector<int32_t> prompt;
    int max_tokens = 0;
  };
  std::vector<Captured> captured;
  Clock::time_point first_submit{};
  bool submitted = false;
  int partials_submitted = 0, finals_submitted = 0;  // live decodes

  prism::Status submit(prism::serving::RequestPtr r) {
    auto* in = dynamic_cast<prism::frontends::GenerateInput*>(r->input.get());
    {
      std::lock_guard lock(mu);
      if (!submitted) first_submit = Clock::now(), submitted = true;
      if (in != nullptr && in->audio.has_value()) {
        if (fix_live_tokens) {
          const bool partial = in->audio->frames < prism::media::kWhisperChunkFrames;
          ++(partial ? partials_submitted : finals_submitted);
          const int64_t frames = partial ? in->audio->frames : audio_frames(*in->audio);
          const int n = std::max(1, int(std::lround(tokens_per_second * double(frames) / 100.0)));
          in->sampling.max_tokens = std::min(in->sampling.max_tokens, n);
          in->sampling.ignore_eos = true;
          r->cost_tokens = int64_t(in->prompt.size()) + in->sampling.max_tokens;
          if (in->logits_processor)
            in->logits_processor = [rules = std::move(in->logits_processor)](int choice) {
              return std::unique_ptr<prism::frontends::LogitsProcessor>(new ConfidentChoice(rules(choice)));
            };
        }
        if (capture) captured.push_back({in->audio->features, in->audio->frames, in->prompt, in->sampling.max_tokens});
      }
    }
    return deployment->submit(std::move(r));
  }
  void reset() {
    std::lock_guard lock(mu);
    captured.clear();
    submitted = false;
  }
};

struct Bench {
  prism::serving::MetricsRegistry metrics;
  std::unique_ptr<prism::serving::Deployment> deployment;
  std::shared_ptr<Submitter> submitter = std::make_shared<Submitter>();
  asr::TranscriptionContext context;
};

prism::Status start_deployment(const Options& o, int encoder_segments, Bench& b) {
  prism::serving::EngineFactories factories;
  gen::register_generate_engine(factories);
  PRISM_ASSIGN_OR_RETURN(prism::serving::EngineKind kind, factories.find("transcribe"));
  prism::serving::DeploymentConfig c;
  c.name = "bench";
  c.task = "transcribe";
  c.model = o.model;
  c.precision = o.precision;
  c.timeout_ms = 0;
  c.batching.max_batch_size = o.max_batch;
  c.knobs.set("kv_cache_bytes", o.kv_cache_mib << 20);
  c.knobs.set("vad", std::string("energy"));
  if (encoder_segments > 0) c.knobs.set("max_encoder_segments", int64_t(encoder_segments));
  PRISM_RETURN_IF_ERROR(c.validate());
  b.deployment = std::make_unique<prism::serving::Deployment>(c, kind, b.metrics);
  b.deployment->start();
  PRISM_RETURN_IF_ERROR(b.deployment->wait_ready());

  // As pipelines/transcribe/asr_service.cpp builds it, with the bench's submit function.
  asr::TranscriptionContext& ctx = b.context;
  ctx.frontend = std::dynamic_pointer_cast<const prism::frontends::GenerateFrontend>(b.deployment->frontend());
  if (!ctx.frontend || ctx.frontend->speech() == nullptr)
    return prism::failed_precondition(o.model + " is not a speech model");
  PRISM_ASSIGN_OR_RETURN(ctx.settings, asr::TranscribeSettings::from_knobs(c.knobs));
  ctx.settings.max_chunks_in_flight = o.max_batch;
  PRISM_ASSIGN_OR_RETURN(ctx.vad, asr::VoiceActivity::connect(ctx.settings.vad, nullptr));  // energy
  ctx.metrics = std::make_shared<asr::AsrMetrics>(b.metrics, prism::serving::Labels{{"deployment", "bench"},
                                                                                    {"modality", "asr"}});
  b.submitter->deployment = b.deployment.get();
  ctx.submit = [s = b.submitter](prism::serving::RequestPtr r) { return s->submit(std::move(r)); };
  return {};
}

// ---- long-form -------------------------------------------------------------------------------

struct LongForm {
  double total_s = 0, front_s = 0;  // start → transcript; start → first chunk submitted
  asr::TranscriptStats stats;
  double decode_s() const { return total_s - front_s; }
};

prism::Result<LongForm> transcribe(Bench& b, const std::vector<float>& samples, bool parallel, int tokens) {
  asr::TranscriptionContext ctx = b.context;
  ctx.settings.parallel_chunks = parallel;
  asr::TranscribeOptions opt;
  opt.language = "en";
  opt.temperature_fallback = false;  // random weights fail whisper's checks: one decode a chunk
  opt.fixed_tokens_per_chunk = tokens;
  auto done = std::make_shared<std::promise<prism::Result<asr::Transcript>>>();
  auto result = done->get_future();
  asr::TranscriptionEvents events;
  events.on_done = [done](prism::Result<asr::Transcript> t) { done->set_value(std::move(t)); };
  b.submitter->reset();
  const auto t0 = Clock::now();
  auto t = asr::Transcription::start(ctx, samples, opt, std::move(events));
  prism::Result<asr::Transcript> transcript = result.get();
  LongForm f;
  f.total_s = seconds_since(t0);
  if (!transcript.has_value()) return transcript.status();
  {
    std::lock_guard lock(b.submitter->mu);
    f.front_s = b.submitter->submitted ? seconds_between(t0, b.submitter->first_submit) : 0.0;
  }
  f.stats = transcript->stats;
  return f;
}

// ---- live ------------------------------------------------------------------------------------

struct LiveRun {
  int streams = 0;
  std::vector<double> latencies_s;  // per partial: its newest chunk's append → the partial
  int finals = 0;
  std::vector<std::string> errors;  // streams the scheduler closed
  int partial_decodes = 0, final_decodes = 0;  // submitted
  int64_t longest_partial = -1;     // index into the submitter's captures: the widest window
};

prism::Result<LiveRun> run_live(const Options& o, Bench& b, const std::vector<float>& recording, int num_streams,
                                double seconds, bool capture) {
  asr::LiveSettings settings;  // defaults: 10-ms tick, partials every 200 ms of speech, 5-s windows
  Submitter& sub = *b.submitter;
  {
    std::lock_guard lock(sub.mu);
    sub.fix_live_tokens = true;
    sub.tokens_per_second = o.tokens_per_second();
    sub.capture = capture;
    sub.captured.clear();
    sub.partials_submitted = sub.finals_submitted = 0;
  }
  auto scheduler = asr::LiveScheduler::create(b.context, settings);
  const int chunks = int(seconds * 5);
  struct StreamState {
    std::shared_ptr<asr::LiveStream> stream;
    std::vector<Clock::time_point> appended;  // per 200-ms chunk
    std::mutex mu;
    std::vector<std::pair<Clock::time_point, double>> partials;  // (received, end s)
    int finals = 0;
    int committed = 0, finished = 0;  // items whose final was queued / came back (or failed)
    std::string error;  // the stream was closed by the scheduler
    size_t offset = 0;  // where in the recording this stream starts
  };
  std::vector<std::unique_ptr<StreamState>> states;
  for (int s = 0; s < num_streams; ++s) {
    auto st = std::make_unique<StreamState>();
    st->appended.resize(size_t(chunks));
    st->offset = size_t(s) * size_t(1.3 * kRate) % recording.size();  // streams out of step
    StreamState* raw = st.get();
    asr::LiveStreamEvents events;
    events.on_partial = [raw](const asr::LivePartial& p) {
      std::lock_guard lock(raw->mu);
      raw->partials.emplace_back(Clock::now(), p.end);
    };
    events.on_final = [raw](int64_t, const asr::Transcript&) {
      std::lock_guard lock(raw->mu);
      ++raw->finals;
      ++raw->finished;
    };
    events.on_final_failed = [raw](int64_t, const prism::Status&) {
      std::lock_guard lock(raw->mu);
      ++raw->finished;
    };
    events.on_committed = [raw](int64_t, double, double) {
      std::lock_guard lock(raw->mu);
      ++raw->committed;
    };
    events.on_error = [raw](const prism::Status& e) {
      std::lock_guard lock(raw->mu);
      raw->error = e.to_string();
    };
    asr::LiveStreamOptions options;
    options.language = "en";
    // OpenAI's Realtime server_vad defaults: 500 ms of silence ends a turn, 300 ms of padding.
    prism::media::VadParams vad = scheduler->vad_params();
    vad.min_silence_ms = 500;
    vad.speech_pad_ms = 300;
    options.vad = vad;
    PRISM_ASSIGN_OR_RETURN(st->stream, scheduler->open(options, std::move(events)));
    states.push_back(std::move(st));
  }
  const auto t0 = Clock::now() + std::chrono::milliseconds(20);
  for (int k = 0; k < chunks; ++k) {
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(200 * (k + 1)));  // chunk k's end, in real time
    for (auto& st : states) {
      std::vector<float> chunk(kLiveChunkSamples);
      for (int i = 0; i < kLiveChunkSamples; ++i)
        chunk[size_t(i)] = recording[(st->offset + size_t(k) * kLiveChunkSamples + size_t(i)) % recording.size()];
      if (st->stream->closed()) continue;
      if (const prism::Status s = st->stream->append(chunk); !s.ok() && !st->stream->closed()) return s;
      st->appended[size_t(k)] = Clock::now();
    }
  }
  // Partials and finals in flight land (at most 20 s more).
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (bool busy = true; busy && Clock::now() < deadline;) {
    busy = false;
    for (auto& st : states) {
      std::lock_guard lock(st->mu);
      busy = busy || (st->error.empty() && st->finished < st->committed);
    }
    if (busy) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  scheduler->stop();
  LiveRun run;
  run.streams = num_streams;
  for (auto& st : states) {
    std::lock_guard lock(st->mu);
    run.finals += st->finals;
    if (!st->error.empty()) run.errors.push_back(st->error);
    for (const auto& [received, end] : st->partials) {
      // The partial covers the stream up to `end`: the chunk that brought its newest audio.
      const int64_t k = (int64_t(std::llround(end * kRate)) + kLiveChunkSamples - 1) / kLiveChunkSamples - 1;
      if (k < 0 || k >= chunks) continue;
      run.latencies_s.push_back(seconds_between(st->appended[size_t(k)], received));
    }
  }
  {
    std::lock_guard lock(sub.mu);
    sub.fix_live_tokens = false;
    sub.capture = false;
    run.partial_decodes = sub.partials_submitted;
    run.final_decodes = sub.finals_submitted;
    int64_t widest = 0;
    for (size_t i = 0; i < sub.captured.size(); ++i)
      if (sub.captured[i].frames < prism::media::kWhisperChunkFrames && sub.captured[i].frames > widest)
        widest = sub.captured[i].frames, run.longest_partial = int64_t(i);
  }
  return run;
}

// ---- the models alone --------------------------------------------------------------------------

// One decoder step of `batch` sequences of `context` cached tokens each, each with its own
// cross-attention memory: the time of the best of `repeats`.
double decoder_step_seconds(prism::models::Decoder& decoder, const std::vector<const prism::models::CrossKv*>& cross,
                            int context, int repeats) {
  constexpr int kBlock = 16;
  const int batch = int(cross.size());
  const prism::models::KvSpec spec = decoder.kv_spec();
  const int blocks_per_seq = (context + 1 + kBlock - 1) / kBlock;
  std::vector<prism::models::KvLayer> kv(size_t(spec.num_layers));
  for (auto& layer : kv) {
    layer.k = Tensor::zeros({batch * blocks_per_seq, kBlock, spec.num_kv_heads, spec.head_dim}, DType::f32);
    layer.v = Tensor::zeros({batch * blocks_per_seq, kBlock, spec.num_kv_heads, spec.head_dim}, DType::f32);
  }
  std::vector<int32_t> ids(size_t(batch), 50), positions(size_t(batch), context), slots, cu = {0}, lens, rows, table;
  for (int s = 0; s < batch; ++s) {
    slots.push_back(s * blocks_per_seq * kBlock + context);
    cu.push_back(s + 1);
    lens.push_back(context + 1);
    rows.push_back(s);
    for (int k = 0; k < blocks_per_seq; ++k) table.push_back(s * blocks_per_seq + k);
  }
  prism::models::DecoderBatch in;
  in.token_ids = Tensor::from<int32_t>(ids, {batch});
  in.positions = Tensor::from<int32_t>(positions, {batch});
  in.slot_mapping = Tensor::from<int32_t>(slots, {batch});
  in.cu_seqlens_q = Tensor::from<int32_t>(cu, {batch + 1});
  in.block_tables = Tensor::from<int32_t>(table, {batch, blocks_per_seq});
  in.context_lens = Tensor::from<int32_t>(lens, {batch});
  in.logits_rows = Tensor::from<int32_t>(rows, {batch});
  in.cross = cross;
  double best = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {  // the first is a warm-up
    const auto t0 = Clock::now();
    decoder.forward(in, kv);
    if (r > 0) best = std::min(best, seconds_since(t0));
  }
  return best;
}

// Logits [vocab] after `prompt` over `cross`, the decoder alone (contiguous f32 KV).
std::vector<float> prompt_logits(prism::models::Decoder& decoder, const std::vector<int32_t>& prompt,
                                 const prism::models::CrossKv& cross) {
  constexpr int kBlock = 16;
  const int t = int(prompt.size());
  const int blocks = (t + kBlock - 1) / kBlock;
  const prism::models::KvSpec spec = decoder.kv_spec();
  std::vector<prism::models::KvLayer> kv(size_t(spec.num_layers));
  for (auto& layer : kv) {
    layer.k = Tensor::zeros({blocks, kBlock, spec.num_kv_heads, spec.head_dim}, DType::f32);
    layer.v = Tensor::zeros({blocks, kBlock, spec.num_kv_heads, spec.head_dim}, DType::f32);
  }
  std::vector<int32_t> positions(static_cast<size_t>(t)), table(static_cast<size_t>(blocks));
  for (int i = 0; i < t; ++i) positions[size_t(i)] = i;
  for (int k = 0; k < blocks; ++k) table[size_t(k)] = k;
  prism::models::DecoderBatch in;
  in.token_ids = Tensor::from<int32_t>(prompt, {t});
  in.positions = Tensor::from<int32_t>(positions, {t});
  in.slot_mapping = Tensor::from<int32_t>(positions, {t});
  in.cu_seqlens_q = Tensor::from<int32_t>({0, t}, {2});
  in.block_tables = Tensor::from<int32_t>(table, {1, blocks});
  in.context_lens = Tensor::from<int32_t>({t}, {1});
  in.logits_rows = Tensor::from<int32_t>({t - 1}, {1});
  in.cross = {&cross};
  const Tensor logits = decoder.forward(in, kv);
  return {logits.data<float>(), logits.data<float>() + logits.numel()};
}

Tensor features_tensor(const Submitter::Captured& c, int64_t n_mels) {
  return Tensor::from<float>(*c.features, {1, n_mels, c.frames});
}

// ---- the peer ----------------------------------------------------------------------------------

struct PeerFigures {
  bool ok = false;
  double total_s = 0, encoder_s = 0, decoder_s = 0;
  double partial_s = 0, partial_encoder_s = 0;
  std::vector<float> check_logits;
};

PeerFigures run_peer(const Options& o, const std::vector<Submitter::Captured>& chunks,
                     const Submitter::Captured* partial, int64_t n_mels, const std::vector<int32_t>& suppress) {
  const std::string dir = (fs::temp_directory_path() / ("prism_asr_bench_" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  nlohmann::json plan = {{"tokens", o.tokens_per_chunk}, {"suppress", suppress}, {"chunks", nlohmann::json::array()}};
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string name = "chunk." + std::to_string(i);
    tensors.emplace_back(name + ".features", Tensor::from<float>(*chunks[i].features, {n_mels, chunks[i].frames}));
    tensors.emplace_back(name + ".prompt",
                         Tensor::from<int32_t>(chunks[i].prompt, {int64_t(chunks[i].prompt.size())}));
    plan["chunks"].push_back({{"features", name + ".features"}, {"prompt", name + ".prompt"}});
  }
  if (partial != nullptr) {
    tensors.emplace_back("partial.features", Tensor::from<float>(*partial->features, {n_mels, partial->frames}));
    tensors.emplace_back("partial.prompt", Tensor::from<int32_t>(partial->prompt, {int64_t(partial->prompt.size())}));
    plan["partial"] = {{"features", "partial.features"}, {"prompt", "partial.prompt"},
                       {"tokens", partial->max_tokens}, {"repeats", 3}};
  }
  PeerFigures p;
  if (const prism::Status st = prism::formats::write_safetensors(dir + "/inputs.safetensors", tensors); !st.ok()) {
    std::fprintf(stderr, "asr_bench: %s\n", st.to_string().c_str());
    return p;
  }
  std::ofstream(dir + "/plan.json") << plan.dump();
  const std::string out = dir + "/peer.json";
  const std::string cmd = "OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " PRISM_SOURCE_DIR "/bench/asr_peer.py run --model '" +
                          o.model + "' --plan '" + dir + "/plan.json' --inputs '" + dir + "/inputs.safetensors' --out '" +
                          out + "' --dtype " + (o.precision == "f32" ? "f32" : "bf16") + " --threads " +
                          std::to_string(prism::num_threads());
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream f(out);
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    auto check = prism::formats::SafetensorsFile::open(dir + "/check.safetensors");
    if (!j.is_discarded() && check.has_value()) {
      p.ok = true;
      p.total_s = j.value("total_s", 0.0);
      for (const auto& c : j["chunks"]) {
        p.encoder_s += c.value("encoder_s", 0.0);
        p.decoder_s += c.value("decoder_s", 0.0);
      }
      p.partial_s = j.value("partial_s", 0.0);
      p.partial_encoder_s = j.value("partial_encoder_s", 0.0);
      if (auto t = (*check)->get("logits"); t.has_value()) {
        const Tensor c = t->contiguous();
        p.check_logits.assign(c.data<float>(), c.data<float>() + c.numel());
      }
    }
  }
  fs::remove_all(dir);
  return p;
}

// max |a - b| / max |b|.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

void print_ratio_row(const char* what, double prism_s, double peer_s) {
  if (prism_s > 0 && peer_s > 0)
    std::printf("%-58s %10.3f %10.3f %8.2fx\n", what, prism_s, peer_s, peer_s / prism_s);
  else
    std::printf("%-58s %10.3f %10s %9s\n", what, prism_s, "-", "-");
}

int usage() {
  std::fprintf(stderr,
               "usage: asr_bench --model DIR [--precision f32|bf16|int8] [--modes longform,live,model,peer] [--no-peer]\n"
               "       [--audio FILE] [--minutes 10] [--silence-seconds 2] [--tokens-per-chunk 100]\n"
               "       [--streams 1,4,8] [--live-seconds 20] [--max-batch 32] [--kv-cache-mib 256]\n"
               "       [--encoder-segments N,M...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") o.model = next();
    else if (a == "--audio") o.audio = next();
    else if (a == "--precision") o.precision = next();
    else if (a == "--modes") {
      o.modes.clear();
      for (const std::string& m : split(next())) o.modes.insert(m);
    } else if (a == "--no-peer") o.modes.erase("peer");
    else if (a == "--minutes") o.minutes = std::atof(next().c_str());
    else if (a == "--silence-seconds") o.silence_seconds = std::atof(next().c_str());
    else if (a == "--tokens-per-chunk") o.tokens_per_chunk = std::atoi(next().c_str());
    else if (a == "--streams") {
      o.streams.clear();
      for (const std::string& s : split(next())) o.streams.push_back(std::atoi(s.c_str()));
    } else if (a == "--live-seconds") o.live_seconds = std::atof(next().c_str());
    else if (a == "--max-batch") o.max_batch = std::atoi(next().c_str());
    else if (a == "--kv-cache-mib") o.kv_cache_mib = std::atoll(next().c_str());
    else if (a == "--encoder-segments") {
      o.encoder_segments.clear();
      for (const std::string& n : split(next())) o.encoder_segments.push_back(std::atoi(n.c_str()));
    }
    else return usage();
  }
  for (const std::string& m : o.modes)
    if (m != "longform" && m != "live" && m != "model" && m != "peer") {
      std::fprintf(stderr, "asr_bench: unknown mode '%s'\n", m.c_str());
      return usage();
    }
  auto precision = prism::ops::parse_precision(o.precision);
  if (o.model.empty() || !precision.has_value() || o.minutes <= 0 || o.tokens_per_chunk < 1 || o.max_batch < 1 ||
      o.live_seconds < 1 || o.silence_seconds < 0)
    return usage();
  for (int s : o.streams)
    if (s < 1) return usage();
  if (o.encoder_segments.empty()) return usage();
  for (int n : o.encoder_segments)
    if (n < 0) return usage();
  // The peer times the sequential run's chunks: it needs the long-form mode.
  if (o.modes.count("peer")) o.modes.insert("longform");
  auto config = prism::configs::WhisperConfig::load(o.model);
  if (!config.has_value()) return fail(config.status());
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures appear as they are measured
  prism::set_num_threads(0);
  std::printf("model %s (whisper: d_model %lld, %lld+%lld layers, vocab %lld), precision %s, %d threads\n",
              o.model.c_str(), static_cast<long long>(config->d_model), static_cast<long long>(config->encoder_layers),
              static_cast<long long>(config->decoder_layers), static_cast<long long>(config->vocab_size),
              o.precision.c_str(), prism::num_threads());

  // ---- the audio ----
  std::vector<float> clip;
  {
    std::ifstream f(o.audio, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto audio = prism::media::decode_audio({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    if (!audio.has_value()) return fail(audio.status());
    clip = std::move(audio->samples);
  }
  const double clip_s = double(clip.size()) / kRate;
  const std::vector<float> recording = looped(clip, o.silence_seconds, o.minutes * 60);
  const double audio_s = double(recording.size()) / kRate;

  Bench b;
  std::optional<LongForm> seq_run;                               // kept for the peer's table
  std::vector<std::pair<std::string, LongForm>> parallel_runs;  // (max_encoder_segments, figures)
  std::vector<Submitter::Captured> sequential_chunks;
  const Submitter::Captured* longest_partial = nullptr;
  std::vector<Submitter::Captured> live_captures;
  auto segments_label = [](int n) { return n > 0 ? std::to_string(n) : std::string("default"); };
  // (Re)starts the deployment with max_encoder_segments n and warms it up (not timed: the clip once).
  auto deploy = [&](int n) -> prism::Status {
    if (b.deployment) b.deployment->stop();
    const auto t0 = Clock::now();
    PRISM_RETURN_IF_ERROR(start_deployment(o, n, b));
    std::printf("deployment ready in %.1f s (max_batch_size %d, max_encoder_segments %s, energy VAD)\n",
                seconds_since(t0), o.max_batch, segments_label(n).c_str());
    if (auto w = transcribe(b, clip, true, o.tokens_per_chunk); !w.has_value()) return w.status();
    return {};
  };
  const bool engine = o.modes.count("longform") || o.modes.count("live");
  if (engine)
    if (const prism::Status s = deploy(o.encoder_segments[0]); !s.ok()) return fail(s);
  auto print_longform_header = [] {
    std::printf("%-40s %9s %14s %10s %8s %12s %10s\n", "", "total s", "VAD+log-mel s", "decode s", "RTF",
                "RTF decode", "tokens/s");
  };
  auto print_longform_row = [&](const std::string& name, const LongForm& f) {
    std::printf("%-40s %9.2f %14.2f %10.2f %8.4f %12.4f %10.1f\n", name.c_str(), f.total_s, f.front_s, f.decode_s(),
                f.total_s / audio_s, f.decode_s() / audio_s, double(f.stats.decoded_tokens) / f.decode_s());
  };

  if (o.modes.count("longform")) {
    std::printf("\nlong-form: %.0f s of audio (%s, %.1f s, repeated with %.1f-s silences), %d tokens per chunk (%.2f "
                "tokens/s of audio), language given, no temperature fallback\n",
                audio_s, fs::path(o.audio).filename().c_str(), clip_s, o.silence_seconds, o.tokens_per_chunk,
                o.tokens_per_second());
    b.submitter->capture = true;
    auto seq = transcribe(b, recording, false, o.tokens_per_chunk);
    b.submitter->capture = false;
    if (!seq.has_value()) return fail(seq.status());
    {
      std::lock_guard lock(b.submitter->mu);
      sequential_chunks = b.submitter->captured;
    }
    auto par = transcribe(b, recording, true, o.tokens_per_chunk);
    if (!par.has_value()) return fail(par.status());
    std::printf("%d chunks (mean %.1f s of audio, %.1f s of it speech), %lld tokens decoded per run\n", seq->stats.chunks,
                audio_s / std::max(1, seq->stats.chunks), seq->stats.speech_seconds / std::max(1, seq->stats.chunks),
                static_cast<long long>(seq->stats.decoded_tokens));
    print_longform_header();
    print_longform_row("sequential chunks", *seq);
    print_longform_row("parallel, max_encoder_segments " + segments_label(o.encoder_segments[0]), *par);
    std::printf("parallel vs sequential: %.2fx faster (decode alone %.2fx)\n", seq->total_s / par->total_s,
                seq->decode_s() / par->decode_s());
    seq_run = *seq;
    parallel_runs.emplace_back(segments_label(o.encoder_segments[0]), *par);
  }

  std::map<int, std::pair<double, double>> live_p50_p99;
  if (o.modes.count("live")) {
    std::printf("\nlive: 200-ms chunks appended in real time for %.0f s per stream (streams start 1.3 s apart in the "
                "recording); partials every 200 ms of speech over <= 5-s windows, %.2f tokens per second of window; "
                "latency = newest chunk appended -> partial received\n",
                o.live_seconds, o.tokens_per_second());
    if (auto w = run_live(o, b, recording, 1, 3, false); !w.has_value()) return fail(w.status());  // warm-up
    std::printf("%-8s %18s %14s %9s %9s %9s %9s\n", "streams", "partials (decoded)", "finals (decoded)", "p50 ms",
                "p99 ms", "mean ms", "max ms");
    for (int s : o.streams) {
      auto run = run_live(o, b, recording, s, o.live_seconds, s == 1);
      if (!run.has_value()) return fail(run.status());
      double mean = 0, max = 0;
      for (double l : run->latencies_s) mean += l / double(run->latencies_s.size()), max = std::max(max, l);
      const double p50 = percentile(run->latencies_s, 0.5), p99 = percentile(run->latencies_s, 0.99);
      live_p50_p99[s] = {p50, p99};
      for (const std::string& e : run->errors) std::printf("  a stream was closed: %s\n", e.c_str());
      std::printf("%-8d %9zu (%6d) %7d (%4d) %9.1f %9.1f %9.1f %9.1f\n", s, run->latencies_s.size(),
                  run->partial_decodes, run->finals, run->final_decodes, 1e3 * p50, 1e3 * p99, 1e3 * mean, 1e3 * max);
      if (s == 1 && run->longest_partial >= 0) {
        std::lock_guard lock(b.submitter->mu);
        live_captures = {b.submitter->captured[size_t(run->longest_partial)]};
      }
    }
    if (!live_captures.empty()) longest_partial = &live_captures[0];
  }
  if (o.modes.count("longform") && o.encoder_segments.size() > 1) {
    std::printf("\nlong-form, parallel chunks at other max_encoder_segments (speech segments per encoder call)\n");
    for (size_t i = 1; i < o.encoder_segments.size(); ++i) {
      if (const prism::Status s = deploy(o.encoder_segments[i]); !s.ok()) return fail(s);
      if (i == 1) print_longform_header();
      auto par = transcribe(b, recording, true, o.tokens_per_chunk);
      if (!par.has_value()) return fail(par.status());
      print_longform_row("parallel, max_encoder_segments " + segments_label(o.encoder_segments[i]), *par);
      parallel_runs.emplace_back(segments_label(o.encoder_segments[i]), *par);
      std::printf("  vs sequential: %.2fx faster (decode alone %.2fx)\n", seq_run->total_s / par->total_s,
                  seq_run->decode_s() / par->decode_s());
    }
  }
  if (b.deployment) b.deployment->stop();

  // ---- the models alone ----
  const bool peer = o.modes.count("peer") > 0;
  if (!o.modes.count("model") && !peer) return 0;
  auto encoder = prism::models::load_whisper_encoder(o.model, *precision);
  if (!encoder.has_value()) return fail(encoder.status());
  auto decoder = prism::models::load_whisper_decoder(o.model, *precision);
  if (!decoder.has_value()) return fail(decoder.status());
  const int64_t n_mels = (*encoder)->num_mel_bins();
  if (o.modes.count("model")) {
    const prism::Result<double> peak_r = prism::measure_gemm_peak(*precision);
    const double peak = peak_r.has_value() ? *peak_r : 0.0;
    const double gbs = prism::bench::measure_read_bandwidth_gbs(size_t(512) << 20);
    std::printf("\nthe models alone (%s GEMM peak %.0f GFLOP/s, read bandwidth %.1f GB/s, measured now)\n",
                o.precision.c_str(), peak, gbs);
    // 30-s segments of the clip's log-mel (the values do not change the speed).
    const prism::media::LogMel mel = prism::media::log_mel_spectrogram(clip, int(n_mels));
    std::vector<std::shared_ptr<const prism::models::CrossKv>> crosses;
    std::printf("%-28s %12s %12s %10s\n", "encoder, 30-s segments", "segments/s", "GFLOP/s", "of peak");
    for (int batch : {1, 4, 8}) {
      std::vector<float> values;
      for (int i = 0; i < batch; ++i) values.insert(values.end(), mel.values.begin(), mel.values.end());
      const Tensor x = Tensor::from<float>(values, {batch, n_mels, mel.frames});
      (*encoder)->encode(x);  // warm-up
      const auto t0 = Clock::now();
      auto out = (*encoder)->encode(x);
      const double t = seconds_since(t0);
      if (batch == 8) crosses = out;
      const double gflops = (*encoder)->flops_per_segment() * batch / t * 1e-9;
      std::printf("batch %-22d %12.2f %12.1f %9.0f%%\n", batch, batch / t, gflops, peak > 0 ? 100 * gflops / peak : 0.0);
    }
    const prism::models::KvSpec spec = (*decoder)->kv_spec();
    constexpr int kContext = 64;  // tokens already decoded in each sequence
    const double self_kv_bytes = 2.0 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 4 * (kContext + 1);
    std::printf("%-28s %12s %12s %10s\n", "decoder step, 30-s memory", "ms", "roofline ms", "of roof");
    for (int batch : {1, 8}) {
      std::vector<const prism::models::CrossKv*> cross;
      for (int i = 0; i < batch; ++i) cross.push_back(crosses[size_t(i % crosses.size())].get());
      const double t = decoder_step_seconds(**decoder, cross, kContext, 5);
      const double bytes = double((*decoder)->weight_bytes()) + batch * (double(crosses[0]->bytes()) + self_kv_bytes);
      const double roof = bytes / (gbs * 1e9);
      std::printf("batch %-22d %12.2f %12.2f %9.0f%%\n", batch, 1e3 * t, 1e3 * roof, 100 * roof / t);
    }
  }
  if (!peer) return 0;

  // ---- the peer ----
  if (sequential_chunks.empty()) return fail(prism::internal_error("no chunks captured for the peer"));
  // The same-weights check: chunk 0's prompt logits, the models alone.
  const auto cross0 = (*encoder)->encode(features_tensor(sequential_chunks[0], n_mels)).at(0);
  const std::vector<float> logits = prompt_logits(**decoder, sequential_chunks[0].prompt, *cross0);
  std::vector<int32_t> suppress;
  {
    std::ifstream f(fs::path(o.model) / "generation_config.json");
    const nlohmann::json g = nlohmann::json::parse(f, nullptr, false);
    if (!g.is_discarded() && g.contains("suppress_tokens") && g["suppress_tokens"].is_array())
      suppress = g["suppress_tokens"].get<std::vector<int32_t>>();
  }
  encoder->reset();  // the peer needs the memory and the cores
  decoder->reset();
  std::printf("\nthe PyTorch peer (%zu chunks one after another, %d tokens each, same features and prompts)...\n",
              sequential_chunks.size(), o.tokens_per_chunk);
  const PeerFigures p = run_peer(o, sequential_chunks, longest_partial, n_mels, suppress);
  if (!p.ok) {
    std::fprintf(stderr, "asr_bench: the PyTorch peer failed\n");
    return 1;
  }
  std::printf("\nagainst the PyTorch peer (%s, same checkpoint and inputs, %d threads; ratios > 1: Prism faster)\n",
              o.precision == "f32" ? "f32" : "bf16", prism::num_threads());
  std::printf("peer long-form, sequential chunks: %.2f s (encoder %.2f s + decoder %.2f s), RTF %.4f (no VAD or "
              "log-mel: it gets Prism's features)\n",
              p.total_s, p.encoder_s, p.decoder_s, p.total_s / audio_s);
  std::printf("%-58s %10s %10s %9s\n", "", "prism s", "peer s", "ratio");
  print_ratio_row("long-form, sequential chunks (decode)", seq_run->decode_s(), p.total_s);
  for (const auto& [segments, f] : parallel_runs) {
    const std::string parallel = "long-form, parallel, max_encoder_segments " + segments;
    print_ratio_row((parallel + " (decode)").c_str(), f.decode_s(), p.total_s);
    print_ratio_row((parallel + " (all)").c_str(), f.total_s, p.total_s);
  }
  if (longest_partial != nullptr && p.partial_s > 0) {
    std::printf("peer live partial (%.1f-s window, %d tokens): %.1f ms (encoder %.1f ms)\n",
                double(longest_partial->frames) / 100.0, longest_partial->max_tokens, 1e3 * p.partial_s,
                1e3 * p.partial_encoder_s);
    if (live_p50_p99.count(1))
      print_ratio_row("live partial latency, 1 stream (p50)", live_p50_p99[1].first, p.partial_s);
  }
  const bool same_size = p.check_logits.size() == logits.size();
  std::printf("same weights check: chunk 0's prompt logits differ by %.2e of their largest (%s on both sides); top "
              "token Prism %d, peer %d\n",
              same_size ? rel_error(logits, p.check_logits) : -1.0, o.precision == "f32" ? "f32" : "bf16",
              argmax(logits), same_size ? argmax(p.check_logits) : -1);
  return 0;
}

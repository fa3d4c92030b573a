// engines/generate/generate_engine.cpp: the continuous-batching loop of tasks "chat" and
// "transcribe". Between steps: take new requests, drop cancelled and expired ones, plan the
// step (scheduler.h), apply it to the block pool, get the media rows of prompts that need them
// (media cache, else one batched encoder run for the whole step) or, for a speech model, the
// cross-attention memory of newly admitted requests' audio (batched encoder runs); then one
// Decoder::forward over the flat batch, logits processors, sampling (or draft verification),
// stop checks, streaming and completion. Metrics of the generate pattern, of VLMs and of
// speech encoding. Every model call (forward and sampling, media and speech encodes, warm-ups)
// runs inside a ComputeTurn (engines/compute_turn.h): deployments take turns on the one compute
// pool. It must not: tokenize, preprocess or compute log-mel features (the api's threads do),
// see HTTP, start threads, or hold a turn across anything but compute.
#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <deque>
#include <exception>
#include <optional>
#include <random>
#include <unordered_map>

#include <unistd.h>

#include "base/check.h"
#include "base/log.h"
#include "engines/compute_turn.h"
#include "engines/encode/media_cache.h"
#include "engines/encode/media_encode.h"
#include "engines/generate/generate_engine_factory.h"
#include "engines/generate/generate_frontend.h"
#include "engines/generate/generate_payload.h"
#include "engines/generate/kv_block_pool.h"
#include "engines/generate/kv_cache.h"
#include "engines/generate/media_rows.h"
#include "engines/generate/scheduler.h"
#include "engines/generate/sequence.h"
#include "engines/generate/speculation.h"
#include "runtime/arena.h"
#include "runtime/threads.h"
#include "serving/config.h"

namespace prism::engines::generate {
namespace {

using serving::Clock;
using serving::RequestPtr;

constexpr double kUsageBuckets[] = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
// Visual tokens per request: a pooled image (16-64) up to long videos.
constexpr double kVisualTokenBuckets[] = {16, 64, 144, 256, 576, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
constexpr size_t kDetokenizerPromptTail = 5;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The engine's series, shared by the replicas of a deployment (same labels, same series).
struct GenerateMetrics {
  GenerateMetrics(serving::MetricsRegistry& m, const serving::Labels& l)
      : ttft(m.histogram("prism_generate_time_to_first_token_seconds",
                         "Submit to the first generated token of a request.", serving::latency_buckets_seconds(), l)),
        itl(m.histogram("prism_generate_inter_token_latency_seconds",
                        "Time between consecutive tokens of a sequence (a step's tokens share its time).",
                        serving::latency_buckets_seconds(), l)),
        e2e(m.histogram("prism_generate_e2e_request_seconds", "Submit to the last token of a request.",
                        serving::latency_buckets_seconds(), l)),
        queue(m.histogram("prism_generate_queue_seconds", "Submit to the first step that computes the request.",
                          serving::latency_buckets_seconds(), l)),
        step_tokens(m.histogram("prism_generate_step_tokens", "Tokens computed per engine step.",
                                serving::batch_token_buckets(), l)),
        running(m.gauge("prism_generate_sequences_running", "Sequences holding KV blocks and being computed.", l)),
        waiting(m.gauge("prism_generate_sequences_waiting",
                        "Sequences taken by the engine waiting for KV blocks or budget (preempted ones included).",
                        l)),
        kv_usage(m.gauge("prism_kv_cache_usage_ratio", "KV blocks referenced by sequences / all KV blocks.", l)),
        prefix_hit(m.counter("prism_prefix_cache_hit_tokens_total", "Prompt tokens whose K/V came from the prefix cache.",
                             l)),
        prefix_queried(m.counter("prism_prefix_cache_queried_tokens_total",
                                 "Prompt tokens looked up in the prefix cache (hit ratio: hit / queried).", l)),
        preemptions(m.counter("prism_generate_preemptions_total",
                              "Sequences preempted (blocks freed, recomputed later) because the KV cache was full.", l)),
        prompt_tokens(m.counter("prism_generate_prompt_tokens_total", "Prompt tokens of admitted requests.", l)),
        generation_tokens(m.counter("prism_generate_generation_tokens_total", "Tokens generated (every choice).", l)),
        draft_tokens(m.counter("prism_spec_draft_tokens_total", "Draft tokens verified by speculative decoding.", l)),
        accepted_tokens(m.counter("prism_spec_accepted_tokens_total",
                                  "Draft tokens accepted (acceptance rate: accepted / draft).", l)) {}

  serving::Histogram& ttft;
  serving::Histogram& itl;
  serving::Histogram& e2e;
  serving::Histogram& queue;
  serving::Histogram& step_tokens;
  serving::Gauge& running;
  serving::Gauge& waiting;
  serving::Gauge& kv_usage;
  serving::Counter& prefix_hit;
  serving::Counter& prefix_queried;
  serving::Counter& preemptions;
  serving::Counter& prompt_tokens;
  serving::Counter& generation_tokens;
  serving::Counter& draft_tokens;
  serving::Counter& accepted_tokens;
};

// The series of a vision-language deployment (registered only when the model has vision).
struct VlmMetrics {
  VlmMetrics(serving::MetricsRegistry& m, const serving::Labels& l)
      : encoder_seconds(m.histogram("prism_vlm_encoder_seconds_per_image",
                                    "Media encoder seconds per item encoded (a run's time over its items, observed "
                                    "once per item).",
                                    serving::latency_buckets_seconds(), l)),
        visual_tokens(m.histogram("prism_vlm_visual_tokens", "Visual tokens (media rows) per request.",
                                  kVisualTokenBuckets, l)),
        frames(m.counter("prism_vlm_frames_sampled_total", "Video frames sampled (views of video items).", l)),
        cache_lookups(m.counter("prism_media_cache_lookups_total", "Media items looked up in the media cache.", l)),
        cache_hits(m.counter("prism_media_cache_hits_total",
                             "Media items whose encoder output came from the media cache (hit ratio: hits / lookups).",
                             l)),
        cache_bytes(m.gauge("prism_media_cache_bytes", "Bytes of encoder outputs in the process's media cache.", l)) {}

  serving::Histogram& encoder_seconds;
  serving::Histogram& visual_tokens;
  serving::Counter& frames;
  serving::Counter& cache_lookups;
  serving::Counter& cache_hits;
  serving::Gauge& cache_bytes;
};

// The series of a speech deployment (registered only when the model has a speech encoder).
struct SpeechMetrics {
  SpeechMetrics(serving::MetricsRegistry& m, const serving::Labels& l)
      : encoder_seconds(m.histogram("prism_asr_encoder_seconds",
                                    "Speech encoder seconds per encode call (the segments of one frame count "
                                    "admitted in one step, up to max_encoder_segments).",
                                    serving::latency_buckets_seconds(), l)),
        segments(m.counter("prism_asr_segments_encoded_total",
                           "Audio segments encoded (once per request: a preempted request keeps its memory).", l)) {}

  serving::Histogram& encoder_seconds;
  serving::Counter& segments;
};

struct EngineKnobs {
  int64_t kv_cache_bytes = 256ll << 20;
  std::string kv_cache_dtype = "auto";
  int block_size = 16;
  int64_t max_step_tokens = 512;
  bool prefix_caching = true;
  std::string speculation = "none";
  int num_speculative_tokens = 4;
  int ngram_min = 1, ngram_max = 3;
  int max_encoder_views = 8;  // VLMs: views per media encoder call
  int max_encoder_segments = 8;  // speech models: audio segments per speech encoder call
};

// The engine's knobs and the frontend's (max_model_len): a text-only chat deployment takes no
// other.
constexpr std::array<std::string_view, 10> kKnownKnobs = {
    "kv_cache_bytes", "kv_cache_dtype", "block_size", "max_step_tokens", "prefix_caching",
    "speculation",    "num_speculative_tokens", "ngram_min", "ngram_max", "max_model_len"};

// A vision-language deployment also takes the engine's max_encoder_views and the vision
// processor's budget and media-source knobs (VisionProcessor::load checks their values); a
// speech deployment the engine's max_encoder_segments and the orchestration's knobs
// (SpeechProcessor::knob_names(); engines/transcribe checks their values).
Result<EngineKnobs> read_knobs(const serving::Knobs& k, bool vision, bool speech) {
  if (vision) {
    std::vector<std::string_view> known(kKnownKnobs.begin(), kKnownKnobs.end());
    known.push_back("max_encoder_views");
    const std::span<const std::string_view> processor = VisionProcessor::knob_names();
    known.insert(known.end(), processor.begin(), processor.end());
    PRISM_RETURN_IF_ERROR(k.check_names(known, "a chat deployment of a vision-language model"));
  } else if (speech) {
    std::vector<std::string_view> known(kKnownKnobs.begin(), kKnownKnobs.end());
    known.push_back("max_encoder_segments");
    const std::span<const std::string_view> orchestration = SpeechProcessor::knob_names();
    known.insert(known.end(), orchestration.begin(), orchestration.end());
    PRISM_RETURN_IF_ERROR(k.check_names(known, "a transcribe deployment"));
  } else {
    PRISM_RETURN_IF_ERROR(k.check_names(kKnownKnobs, "a chat deployment"));
  }
  EngineKnobs e;
  PRISM_ASSIGN_OR_RETURN(e.kv_cache_bytes, k.get_int("kv_cache_bytes", e.kv_cache_bytes));
  PRISM_ASSIGN_OR_RETURN(e.kv_cache_dtype, k.get_string("kv_cache_dtype", e.kv_cache_dtype));
  PRISM_ASSIGN_OR_RETURN(int64_t block_size, k.get_int("block_size", e.block_size));
  PRISM_ASSIGN_OR_RETURN(e.max_step_tokens, k.get_int("max_step_tokens", e.max_step_tokens));
  PRISM_ASSIGN_OR_RETURN(e.prefix_caching, k.get_bool("prefix_caching", e.prefix_caching));
  PRISM_ASSIGN_OR_RETURN(e.speculation, k.get_string("speculation", e.speculation));
  PRISM_ASSIGN_OR_RETURN(int64_t spec, k.get_int("num_speculative_tokens", e.num_speculative_tokens));
  PRISM_ASSIGN_OR_RETURN(int64_t nmin, k.get_int("ngram_min", e.ngram_min));
  PRISM_ASSIGN_OR_RETURN(int64_t nmax, k.get_int("ngram_max", e.ngram_max));
  PRISM_ASSIGN_OR_RETURN(int64_t views, k.get_int("max_encoder_views", e.max_encoder_views));
  PRISM_ASSIGN_OR_RETURN(int64_t segments, k.get_int("max_encoder_segments", e.max_encoder_segments));
  auto bad = [&](std::string_view name, const std::string& rule, int64_t got) {
    return invalid_argument(k.where(name) + " must be " + rule + " (got " + std::to_string(got) + ")");
  };
  if (e.kv_cache_bytes < 1) return bad("kv_cache_bytes", ">= 1", e.kv_cache_bytes);
  if (block_size < 1 || block_size > 1024) return bad("block_size", "in [1, 1024]", block_size);
  if (e.max_step_tokens < 1) return bad("max_step_tokens", ">= 1", e.max_step_tokens);
  if (spec < 1 || spec > 64) return bad("num_speculative_tokens", "in [1, 64]", spec);
  if (nmin < 1 || nmin > 64) return bad("ngram_min", "in [1, 64]", nmin);
  if (nmax < nmin || nmax > 64) return bad("ngram_max", "in [ngram_min, 64]", nmax);
  if (views < 1 || views > 4096) return bad("max_encoder_views", "in [1, 4096]", views);
  if (segments < 1 || segments > 4096) return bad("max_encoder_segments", "in [1, 4096]", segments);
  if (e.speculation != "none" && e.speculation != "ngram")
    return invalid_argument(k.where("speculation") + " must be none or ngram (got '" + e.speculation + "')");
  if (e.kv_cache_dtype != "auto" && e.kv_cache_dtype != "f32" && e.kv_cache_dtype != "bf16" &&
      e.kv_cache_dtype != "int8")
    return invalid_argument(k.where("kv_cache_dtype") + " must be auto, f32, bf16 or int8 (got '" +
                            e.kv_cache_dtype + "')");
  e.block_size = int(block_size);
  e.num_speculative_tokens = int(spec);
  e.ngram_min = int(nmin);
  e.ngram_max = int(nmax);
  e.max_encoder_views = int(views);
  e.max_encoder_segments = int(segments);
  return e;
}

class GenerateEngine final : public serving::Engine {
 public:
  GenerateEngine(const serving::EngineContext& context, std::shared_ptr<const GenerateFrontend> frontend,
                 DecoderLoader loader, MediaEncoderLoader media_loader, SpeechEncoderLoader speech_loader)
      : config_(context.config),
        frontend_(std::move(frontend)),
        loader_(std::move(loader)),
        media_loader_(std::move(media_loader)),
        speech_loader_(std::move(speech_loader)),
        replica_(context.replica),
        replicas_(context.replicas),
        metrics_(context.metrics, context.labels),
        compute_(context.metrics, context.labels),
        seed_rng_(std::random_device{}()) {
    if (frontend_->vision() != nullptr) vlm_metrics_.emplace(context.metrics, context.labels);
    if (frontend_->speech() != nullptr) speech_metrics_.emplace(context.metrics, context.labels);
  }

  Status load() override;
  void serve(serving::BatchSource& source) override;
  nlohmann::json describe() const override;

 private:
  // ---- between steps ----
  void intake(std::vector<RequestPtr> requests);
  Status check(const serving::Request& r) const;
  Status check_media(const GenerateInput& in) const;
  Status check_audio(const GenerateInput& in) const;
  Status load_media_encoder();
  // Loads the speech encoder and warms it up; *warm_cross: a silent segment's memory, for the
  // decoder's warm-up.
  Status load_speech_encoder(std::shared_ptr<const models::CrossKv>* warm_cross);
  void drop_cancelled_and_expired();
  void fail_all(const Status& status);
  int free_slots() const;

  // ---- one step ----
  void step();
  void propose_drafts();
  RunningView running_view(const Sequence& s) const;
  WaitingView waiting_view(Sequence& s) const;
  // Frees a running sequence's blocks and puts it at the front of the waiting list.
  void preempt(Sequence& s);
  // Moves a waiting sequence to running and takes its prefix-cache hit.
  void admit(Sequence& s);
  // Copy on write and new blocks so that s can take n more tokens; false if the pool is dry.
  bool grow(Sequence& s, int64_t n);
  // Where a processor's probe row (LogitsProcessor::probe_position) is in the step's logits.
  enum class ProbeRow : uint8_t {
    none,
    extra,    // one row before the item's rows (a prompt position short of the last)
    sampled,  // the item's first sampled row (the probe position is the prompt's last)
  };
  struct StepItem {
    Sequence* seq;
    int64_t n;         // tokens computed this step
    int64_t rows = 0;  // logits rows: 0, or 1 + drafts when the chunk reaches the last token
    ProbeRow probe = ProbeRow::none;
  };
  // After the forward: advance each sequence by its computed tokens, sample (or verify its
  // drafts) from its rows ([sum rows, vocab] f32, in item order), check stops.
  void sample_step(std::span<const StepItem> items, float* logits);
  // Preempts, admits (taking prefix hits) and grows the planned sequences.
  std::vector<StepItem> apply_plan(const StepPlan& plan);
  // Gives every planned sequence that still has visual positions to compute its requests'
  // media rows: from the media cache, else one batched encoder run over all the step's
  // missing items. Requests whose media fail are completed with the error and leave `items`.
  void acquire_media(std::vector<StepItem>& items);
  struct MediaNeed {
    RequestState* rs;
    size_t item;  // into rs->input->media
  };
  // The items whose rows the planned sequences need and their requests do not hold.
  std::vector<MediaNeed> media_needs(std::span<const StepItem> items) const;
  // Pools an item's features into its request's rows; invalid_argument on a count mismatch.
  Status place_media_rows(const MediaNeed& n, const encode::MediaFeatures& features);
  // Frees the media rows of requests whose running choices are past their visual positions.
  void release_media_rows();
  // Gives every planned request with audio and no cross-attention memory yet (the newly
  // admitted) its memory: one encoder call per frame count and max_encoder_segments segments.
  // Requests whose encoding fails are completed with the error and leave `items`.
  void acquire_cross(std::vector<StepItem>& items);
  // One SpeechEncoder::encode over `features` (each [num_mel_bins, frames] f32); the memories
  // are heap-owned (outlive the encoder's arena). internal_error when the encoder throws or
  // returns the wrong count or frames. *seconds (if given): the call's time.
  Result<std::vector<std::shared_ptr<const models::CrossKv>>> encode_segments(
      std::span<const float* const> features, int64_t frames, double* seconds = nullptr);
  // Whether a waiting sequence looks its prompt up in the prefix cache: not for speech (its
  // K/V depends on the audio, not only the ids) nor when its processor probes a prompt row
  // (a hit would skip the row).
  bool looks_up_prefix(const Sequence& s) const;
  void build_batch(std::vector<StepItem>& items);
  // One Decoder::forward over the batch, then sample_step; a decoder failure fails the
  // step's requests (the engine goes on).
  void forward_and_sample(std::span<const StepItem> items);
  void fork_choices(Sequence& first);
  // Records one sampled token; returns false when the choice finished.
  bool add_token(Sequence& s, const SampledToken& t);
  void finish(Sequence& s, FinishReason reason);
  void publish_full_blocks(Sequence& s);
  std::span<const uint64_t> media_seeds(const Sequence& s) const { return s.request->media.seeds; }
  void release_blocks(Sequence& s);
  // Streams the step's deltas and completes requests whose choices all finished.
  void emit_and_retire();
  void complete(RequestState& rs);
  void remove_request(RequestState* rs, const Status* status);
  void update_gauges();

  std::unique_ptr<Sequence> new_sequence(RequestState& rs, int choice);
  uint64_t choice_seed(const SamplingParams& p, int choice);

  const serving::DeploymentConfig& config_;  // not owned; outlives the engine
  std::shared_ptr<const GenerateFrontend> frontend_;
  DecoderLoader loader_;
  MediaEncoderLoader media_loader_;
  SpeechEncoderLoader speech_loader_;
  const int replica_;
  const int replicas_;
  GenerateMetrics metrics_;
  ComputeMetrics compute_;
  std::optional<VlmMetrics> vlm_metrics_;  // VLMs only
  std::optional<SpeechMetrics> speech_metrics_;  // speech models only
  EngineKnobs knobs_;
  ops::Precision precision_ = ops::Precision::f32;
  std::unique_ptr<models::Decoder> decoder_;
  // VLMs only: the encoder, its runner and the media cache's name for its outputs.
  std::unique_ptr<models::MediaEncoder> media_encoder_;
  std::unique_ptr<encode::MediaEncodeRunner> media_runner_;
  std::string encoder_id_;
  int32_t image_token_id_ = -1;
  // Speech models only: the encoder, its activations' arena and the batch's input features.
  std::unique_ptr<models::SpeechEncoder> speech_encoder_;
  Arena speech_arena_;
  std::vector<float> speech_input_;  // [segments, num_mel_bins, frames] f32 of a batched call
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<KvBlockPool> pool_;
  KvCache kv_;
  SchedulerLimits limits_;
  int64_t max_context_ = 0;
  int64_t vocab_ = 0;
  int threads_ = 1;
  std::mt19937_64 seed_rng_;

  // Replica thread only.
  std::vector<std::unique_ptr<RequestState>> requests_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;   // service order
  std::unordered_map<int64_t, Sequence*> by_id_;
  int64_t next_id_ = 1;
  Arena arena_;
  std::vector<std::vector<SampledToken>> sampled_;  // per step item
  int64_t batch_max_blocks_ = 1;
  std::vector<int32_t> batch_tokens_, batch_positions_, batch_slots_, batch_cu_, batch_ctx_, batch_rows_,
      batch_tables_;
  // Media rows of the batch: (row of the batch, its input embedding); not owned (request rows).
  std::vector<std::pair<int32_t, const float*>> batch_media_;
};

// ------------------------------------------------------------------------------------------
// Load

Status GenerateEngine::load() {
  threads_ = set_replica_team(replicas_);  // this replica's share of the pool

  const bool speech = frontend_->speech() != nullptr;
  if (speech && config_.task != "transcribe")
    return invalid_argument("'" + config_.model + "' is a speech model (Whisper): serve it with task \"transcribe\", "
                            "not \"" + config_.task + "\"");
  if (!speech && config_.task == "transcribe")
    return invalid_argument("task \"transcribe\" needs an encoder-decoder speech model (config.json model_type "
                            "\"whisper\"); '" + config_.model + "' is not one");
  PRISM_ASSIGN_OR_RETURN(knobs_, read_knobs(config_.knobs, frontend_->vision() != nullptr, speech));
  PRISM_ASSIGN_OR_RETURN(precision_, ops::parse_precision(config_.precision));
  PRISM_ASSIGN_OR_RETURN(DType kv_dtype, parse_kv_cache_dtype(knobs_.kv_cache_dtype, precision_));
  PRISM_ASSIGN_OR_RETURN(drafter_, make_drafter(knobs_.speculation, knobs_.ngram_min, knobs_.ngram_max));
  PRISM_ASSIGN_OR_RETURN(decoder_, loader_(config_, precision_));

  vocab_ = decoder_->vocab_size();
  if (frontend_->vision() != nullptr) PRISM_RETURN_IF_ERROR(load_media_encoder());
  std::shared_ptr<const models::CrossKv> warm_cross;
  if (speech) PRISM_RETURN_IF_ERROR(load_speech_encoder(&warm_cross));
  max_context_ = std::min<int64_t>(decoder_->max_context(), frontend_->max_context());
  if (max_context_ < 2) return invalid_argument("the model's context length is below 2 tokens");
  const models::KvSpec spec = decoder_->kv_spec();
  const int64_t per_block = kv_bytes_per_block(spec, knobs_.block_size, kv_dtype);
  const int64_t needed = (max_context_ + knobs_.block_size - 1) / knobs_.block_size;
  // NOTE: without an explicit kv_cache_bytes the budget grows to one sequence of the full
  // context when the default is smaller (real models' contexts of 8k-128k tokens need 0.3-4
  // GiB), up to half the machine's memory. Pages are touched only as blocks fill.
  if (!config_.knobs.has("kv_cache_bytes") && knobs_.kv_cache_bytes < needed * per_block) {
    const int64_t half_ram = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)) / 2;
    if (needed * per_block <= half_ram) {
      knobs_.kv_cache_bytes = needed * per_block;
      PRISM_LOG_INFO("deployment {}: KV budget raised to {} MiB to hold one {}-token sequence (set knob "
                     "kv_cache_bytes to choose it)", config_.name, knobs_.kv_cache_bytes >> 20, max_context_);
    }
  }
  const int64_t num_blocks = knobs_.kv_cache_bytes / per_block;
  // NOTE: slots are i32 (block * block_size + offset) in DecoderBatch::slot_mapping.
  if (num_blocks * knobs_.block_size > INT32_MAX)
    return invalid_argument(config_.knobs.where("kv_cache_bytes") + " = " +
                            std::to_string(knobs_.kv_cache_bytes) + " makes " + std::to_string(num_blocks) +
                            " blocks of " + std::to_string(knobs_.block_size) + " tokens, more than 2^31 token slots");
  if (num_blocks < needed)
    return invalid_argument(
        config_.knobs.where("kv_cache_bytes") + " = " + std::to_string(knobs_.kv_cache_bytes) + " holds " + std::to_string(num_blocks) +
        " blocks of " + std::to_string(knobs_.block_size) + " tokens (" + std::to_string(per_block) +
        " bytes each, " + std::string(dtype_name(kv_dtype)) + "), but one sequence of the context length " +
        std::to_string(max_context_) + " needs " + std::to_string(needed) + " blocks (" +
        std::to_string(needed * per_block) + " bytes); raise kv_cache_bytes or lower max_model_len");
  kv_ = KvCache(spec, int(num_blocks), knobs_.block_size, kv_dtype);
  pool_ = std::make_unique<KvBlockPool>(int(num_blocks), knobs_.block_size, knobs_.prefix_caching);

  limits_.block_size = knobs_.block_size;
  limits_.max_step_tokens = knobs_.max_step_tokens;
  limits_.max_running = std::max(1, config_.batching.max_batch_size);
  // NOTE: every running decode needs a token of the step budget, or the newest would starve.
  if (knobs_.max_step_tokens < limits_.max_running)
    return invalid_argument(config_.knobs.where("max_step_tokens") + " = " +
                            std::to_string(knobs_.max_step_tokens) + " is below batching.max_batch_size = " +
                            std::to_string(limits_.max_running) +
                            ": each running sequence needs at least one token of every step");
  limits_.watermark_blocks = int(std::min<int64_t>(num_blocks / 100, num_blocks - needed));

  // Warm-up: a short forward builds the GEMM primitives and sizes the arena. It writes block
  // 0's first slots, which nobody owns yet (the next owner overwrites them).
  {
    const int n = int(std::min<int64_t>(4, knobs_.block_size));
    ArenaScope scope(&arena_);
    models::DecoderBatch b;
    std::vector<int32_t> ids(size_t(n), frontend_->eos_token_ids().empty() ? 0 : frontend_->eos_token_ids()[0]);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::vector<int32_t> cu = {0, n}, tables = {0}, ctx = {n}, rows = {n - 1};
    for (int i = 0; i < n; ++i) pos[size_t(i)] = i;
    b.token_ids = Tensor::from<int32_t>(ids, {n});
    b.positions = Tensor::from<int32_t>(pos, {n});
    b.slot_mapping = Tensor::from<int32_t>(pos, {n});
    b.cu_seqlens_q = Tensor::from<int32_t>(cu, {2});
    b.block_tables = Tensor::from<int32_t>(tables, {1, 1});
    b.context_lens = Tensor::from<int32_t>(ctx, {1});
    b.logits_rows = Tensor::from<int32_t>(rows, {1});
    if (warm_cross) b.cross = {warm_cross.get()};
    try {
      ComputeTurn turn(compute_, threads_);
      decoder_->forward(b, kv_.layers());
    } catch (const std::exception& e) {
      return internal_error(std::string("decoder warm-up failed: ") + e.what());
    }
  }
  arena_.reset();

  if (replica_ == 0)
    PRISM_LOG_INFO("deployment {}: generate engine, {} replica(s) × {} thread(s), precision {}, KV {} × {} tokens "
                   "({} tokens, {} MiB {}), max_step_tokens {}, max_running {}, prefix_caching {}, speculation {}",
                   config_.name, replicas_, threads_, ops::precision_name(precision_), num_blocks, knobs_.block_size,
                   num_blocks * knobs_.block_size, kv_.bytes() >> 20, dtype_name(kv_dtype), knobs_.max_step_tokens,
                   limits_.max_running, knobs_.prefix_caching, knobs_.speculation);
  if (replica_ == 0 && media_encoder_)
    PRISM_LOG_INFO("deployment {}: media encoder: views of {}², {} rows each, {} views per call, image token {}",
                   config_.name, media_encoder_->image_size(),
                   media_encoder_->grid_side() * media_encoder_->grid_side(), knobs_.max_encoder_views,
                   image_token_id_);
  if (replica_ == 0 && speech_encoder_)
    PRISM_LOG_INFO("deployment {}: speech encoder: {} mel bins, {} frames in, {} out, {} segments per call",
                   config_.name, speech_encoder_->num_mel_bins(), speech_encoder_->input_frames(),
                   speech_encoder_->output_frames(), knobs_.max_encoder_segments);
  update_gauges();
  return {};
}

Status GenerateEngine::load_speech_encoder(std::shared_ptr<const models::CrossKv>* warm_cross) {
  if (!speech_loader_) return internal_error("a speech deployment needs a speech encoder loader");
  PRISM_ASSIGN_OR_RETURN(speech_encoder_, speech_loader_(config_, precision_));
  if (speech_encoder_ == nullptr) return internal_error("the speech encoder loader returned nothing");
  const models::SpeechEncoder& e = *speech_encoder_;
  const int mels = frontend_->speech()->num_mel_bins();
  if (e.num_mel_bins() != mels)
    return invalid_argument("the speech encoder takes " + std::to_string(e.num_mel_bins()) +
                            " mel bins, but the model's config.json says num_mel_bins = " + std::to_string(mels));
  if (e.input_frames() < 2 || e.input_frames() % 2 != 0)
    return internal_error("the speech encoder takes " + std::to_string(e.input_frames()) +
                          " frames (an even count >= 2 is needed)");
  // Warm-up: a silent full-length segment builds the encoder's primitives and sizes its arena.
  const std::vector<float> silence(size_t(e.num_mel_bins() * e.input_frames()), 0.0f);
  const float* features[] = {silence.data()};
  PRISM_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const models::CrossKv>> cross,
                         encode_segments(features, e.input_frames()));
  *warm_cross = std::move(cross.front());
  return {};
}

Status GenerateEngine::load_media_encoder() {
  if (!media_loader_) return internal_error("a vision-language deployment needs a media encoder loader");
  PRISM_ASSIGN_OR_RETURN(media_encoder_, media_loader_(config_, precision_));
  if (media_encoder_ == nullptr) return internal_error("the media encoder loader returned nothing");
  const models::MediaEncoder& e = *media_encoder_;
  if (e.image_size() < 1 || e.grid_side() < 1)
    return internal_error("the media encoder takes views of side " + std::to_string(e.image_size()) +
                          " into grids of side " + std::to_string(e.grid_side()));
  if (e.output_size() != decoder_->hidden_size())
    return invalid_argument("the media encoder gives rows of " + std::to_string(e.output_size()) +
                            " values, but the language model's hidden size is " +
                            std::to_string(decoder_->hidden_size()));
  image_token_id_ = frontend_->vision()->image_token_id();
  if (image_token_id_ < 0 || image_token_id_ >= vocab_)
    return invalid_argument("the image token id " + std::to_string(image_token_id_) +
                            " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  encoder_id_ = config_.model + "|" + std::string(ops::precision_name(precision_)) + "|vlm";
  media_runner_ = std::make_unique<encode::MediaEncodeRunner>(e, knobs_.max_encoder_views);
  // Warm-up: one blank view builds the encoder's primitives and checks its output shape.
  media::PixelViews blank;
  blank.side = int(e.image_size());
  blank.num_views = 1;
  blank.values.assign(size_t(3 * e.image_size() * e.image_size()), 0.0f);
  const media::PixelViews* views[] = {&blank};
  ComputeTurn turn(compute_, threads_);
  return media_runner_->encode(views).status();
}

nlohmann::json GenerateEngine::describe() const {
  nlohmann::json j = {{"engine", "generate"},
                      {"precision", std::string(ops::precision_name(precision_))},
                      {"max_context", max_context_},
                      {"vocab_size", vocab_},
                      {"weight_bytes", decoder_ ? decoder_->weight_bytes() : 0},
                      {"resident_weight_bytes", decoder_ ? decoder_->resident_weight_bytes() : 0},
                      {"block_size", knobs_.block_size},
                      {"kv_blocks", kv_.num_blocks()},
                      {"kv_token_capacity", int64_t(kv_.num_blocks()) * kv_.block_size()},
                      {"kv_cache_dtype", std::string(dtype_name(kv_.dtype()))},
                      {"kv_cache_bytes", kv_.bytes()},
                      {"max_step_tokens", knobs_.max_step_tokens},
                      {"max_running", limits_.max_running},
                      {"prefix_caching", knobs_.prefix_caching},
                      {"speculation", knobs_.speculation},
                      {"num_speculative_tokens", knobs_.speculation == "none" ? 0 : knobs_.num_speculative_tokens},
                      {"threads_per_replica", threads_}};
  if (media_encoder_)
    j["vision"] = {{"image_size", media_encoder_->image_size()},
                   {"rows_per_view", media_encoder_->grid_side() * media_encoder_->grid_side()},
                   {"image_token_id", image_token_id_},
                   {"max_encoder_views", knobs_.max_encoder_views}};
  if (speech_encoder_)
    j["speech"] = {{"num_mel_bins", speech_encoder_->num_mel_bins()},
                   {"input_frames", speech_encoder_->input_frames()},
                   {"output_frames", speech_encoder_->output_frames()},
                   {"max_encoder_segments", knobs_.max_encoder_segments}};
  return j;
}

// ------------------------------------------------------------------------------------------
// The loop

// NOTE: when nothing runs or waits the replica blocks in next_batch; otherwise it polls
// between steps for as many requests as there are free sequence slots, so a request joins
// the batch at the next step.
void GenerateEngine::serve(serving::BatchSource& source) {
  while (true) {
    if (running_.empty() && waiting_.empty()) {
      std::vector<RequestPtr> batch = source.next_batch();
      if (batch.empty()) return;
      intake(std::move(batch));
      continue;
    }
    if (source.aborting()) {
      fail_all(unavailable("the server is shutting down"));
      continue;
    }
    if (const int slots = free_slots(); slots > 0) intake(source.poll(slots, knobs_.max_step_tokens));
    drop_cancelled_and_expired();
    if (running_.empty() && waiting_.empty()) continue;
    step();
  }
}

int GenerateEngine::free_slots() const {
  int used = 0;
  for (const Sequence* s : running_) used += 1 + (s->choice == 0 ? s->request->pending_forks : 0);
  for (const Sequence* s : waiting_) used += 1 + (s->choice == 0 ? s->request->pending_forks : 0);
  return limits_.max_running - used;
}

Status GenerateEngine::check(const serving::Request& r) const {
  const auto* in = dynamic_cast<const GenerateInput*>(r.input.get());
  if (in == nullptr) return invalid_argument("the generate engine needs a GenerateInput payload");
  if (in->prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t id : in->prompt)
    if (id < 0 || id >= vocab_)
      return out_of_range("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                          std::to_string(vocab_) + ")");
  const SamplingParams& p = in->sampling;
  if (p.n < 1 || p.n > limits_.max_running)
    return invalid_argument("n must be in [1, " + std::to_string(limits_.max_running) + "] (got " +
                            std::to_string(p.n) + ")");
  if (p.max_tokens < 1) return invalid_argument("max_tokens must be >= 1");
  const int64_t prompt = int64_t(in->prompt.size());
  if (prompt >= max_context_)
    return invalid_argument("This model's maximum context length is " + std::to_string(max_context_) +
                            " tokens. However, the prompt has " + std::to_string(prompt) +
                            " tokens, leaving no room for a completion.");
  const int64_t capacity = int64_t(pool_->num_blocks()) * pool_->block_size();
  if (prompt + 1 > capacity)
    return resource_exhausted("the prompt's " + std::to_string(prompt) + " tokens do not fit in the KV cache (" +
                              std::to_string(capacity) + " tokens)");
  PRISM_RETURN_IF_ERROR(check_audio(*in));
  return check_media(*in);
}

// The shape of a speech prompt's audio segment; audio and speech models go together.
Status GenerateEngine::check_audio(const GenerateInput& in) const {
  if (!in.audio) {
    if (speech_encoder_) return invalid_argument("a request to a speech model needs an audio segment");
    return {};
  }
  if (!speech_encoder_)
    return invalid_argument("this model does not take audio (deployment '" + config_.name +
                            "' serves a model without a speech encoder)");
  const AudioSegment& a = *in.audio;
  const int64_t most = speech_encoder_->input_frames(), mels = speech_encoder_->num_mel_bins();
  if (a.frames < 2 || a.frames % 2 != 0 || a.frames > most)
    return invalid_argument("the audio segment has " + std::to_string(a.frames) +
                            " frames; the speech encoder takes an even count in [2, " + std::to_string(most) + "]");
  const size_t values = a.features ? a.features->size() : 0;
  if (int64_t(values) != mels * a.frames)
    return invalid_argument("the audio segment holds " + std::to_string(values) +
                            " values, not num_mel_bins × frames = " + std::to_string(mels) + " × " +
                            std::to_string(a.frames));
  return {};
}

// The counts of a multimodal prompt (place_media checks its image-token positions).
Status GenerateEngine::check_media(const GenerateInput& in) const {
  if (in.media.empty()) return {};
  if (!media_encoder_)
    return invalid_argument("this model does not take images or videos (deployment '" + config_.name +
                            "' serves a text-only model)");
  for (size_t k = 0; k < in.media.size(); ++k)
    PRISM_RETURN_IF_ERROR(check_media_item(in.media[k], media_encoder_->image_size(), media_encoder_->grid_side(), k));
  return {};
}

std::unique_ptr<Sequence> GenerateEngine::new_sequence(RequestState& rs, int choice) {
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->request = &rs;
  s->choice = choice;
  s->output.index = choice;
  by_id_[s->id] = s.get();
  return s;
}

uint64_t GenerateEngine::choice_seed(const SamplingParams& p, int choice) {
  return p.seed ? *p.seed + uint64_t(choice) : seed_rng_();
}

void GenerateEngine::intake(std::vector<RequestPtr> requests) {
  for (RequestPtr& r : requests) {
    if (r->cancelled()) {
      r->complete_cancelled();
      continue;
    }
    if (Status st = check(*r); !st.ok()) {
      r->complete(std::move(st));
      continue;
    }
    const auto* input = static_cast<const GenerateInput*>(r->input.get());
    PromptMedia media;
    if (media_encoder_) {
      // NOTE: also for prompts without media: image-token ids with no rows behind them are refused.
      Result<PromptMedia> placed = place_media(input->prompt, image_token_id_, input->media);
      if (!placed.has_value()) {
        r->complete(placed.status());
        continue;
      }
      media = std::move(placed).value();
    }
    std::unique_ptr<LogitsProcessor> processor;
    int64_t probe = -1;
    if (input->logits_processor) {
      processor = input->logits_processor(0);
      probe = processor ? processor->probe_position() : -1;
      if (probe >= int64_t(input->prompt.size())) {
        r->complete(invalid_argument("the logits processor probes prompt position " + std::to_string(probe) +
                                     " of a " + std::to_string(input->prompt.size()) + "-token prompt"));
        continue;
      }
    }
    auto rs = std::make_unique<RequestState>();
    rs->request = std::move(r);
    rs->input = input;
    if (!input->media.empty()) {
      rs->media = std::move(media);
      rs->media_held.assign(input->media.size(), 0);
      vlm_metrics_->visual_tokens.observe(double(rs->media.num_rows()));
      for (const MediaItem& item : input->media)
        if (item.kind == MediaItem::Kind::video) vlm_metrics_->frames.inc(double(item.views->num_views));
    }
    rs->pending_forks = rs->input->sampling.n - 1;
    rs->probe_position = probe < 0 ? -1 : probe;
    std::unique_ptr<Sequence> s = new_sequence(*rs, 0);
    const auto& prompt = rs->input->prompt;
    s->tokens = prompt;
    s->processor = std::move(processor);
    s->sampler = std::make_unique<SequenceSampler>(rs->input->sampling, choice_seed(rs->input->sampling, 0), prompt);
    const size_t tail = std::min(prompt.size(), kDetokenizerPromptTail);
    s->detokenizer = std::make_unique<IncrementalDetokenizer>(
        frontend_->tokenizer(), std::span<const int32_t>(prompt).last(tail), rs->input->sampling.stop,
        /*skip_special_tokens=*/true, rs->input->sampling.min_tokens);
    waiting_.push_back(s.get());
    rs->choices.push_back(std::move(s));
    metrics_.prompt_tokens.inc(double(prompt.size()));
    requests_.push_back(std::move(rs));
  }
  update_gauges();
}

void GenerateEngine::drop_cancelled_and_expired() {
  const auto now = Clock::now();
  std::vector<RequestState*> gone;
  for (auto& rs : requests_) {
    const serving::Request& r = *rs->request;
    if (r.cancelled() || now > r.deadline) gone.push_back(rs.get());
  }
  // NOTE: blocks are freed and the gauges updated before the completion runs, so whoever
  // waits on it sees the cache as it is after the request.
  std::vector<RequestPtr> to_complete;
  for (RequestState* rs : gone) {
    to_complete.push_back(rs->request);
    remove_request(rs, nullptr);
  }
  if (gone.empty()) return;
  update_gauges();
  for (RequestPtr& r : to_complete) {
    if (r->cancelled()) r->complete_cancelled();
    else r->complete_deadline_exceeded();
  }
}

void GenerateEngine::fail_all(const Status& status) {
  while (!requests_.empty()) remove_request(requests_.front().get(), &status);
  update_gauges();
}

// Frees every sequence of the request and forgets it; completes it with `status` if given.
void GenerateEngine::remove_request(RequestState* rs, const Status* status) {
  const RequestPtr request = rs->request;
  for (auto& s : rs->choices) {
    release_blocks(*s);
    std::erase(running_, s.get());
    std::erase(waiting_, s.get());
    by_id_.erase(s->id);
  }
  std::erase_if(requests_, [&](const std::unique_ptr<RequestState>& p) { return p.get() == rs; });
  if (status) request->complete(*status);
}

// NOTE: released last block first, so the LRU evicts a cached chain from its tail: the
// blocks a later prompt can still hit (a chain is only usable from its start) go last.
void GenerateEngine::release_blocks(Sequence& s) {
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_->release(*it);
  s.blocks.clear();
  s.num_published = 0;
  s.last_hash = kRootBlockHash;
}

void GenerateEngine::update_gauges() {
  metrics_.running.set(double(running_.size()));
  metrics_.waiting.set(double(waiting_.size()));
  if (pool_) metrics_.kv_usage.set(double(pool_->num_used()) / double(pool_->num_blocks()));
}

// ------------------------------------------------------------------------------------------
// Planning and applying a step

void GenerateEngine::propose_drafts() {
  for (Sequence* s : running_) {
    s->draft.clear();
    // NOTE: a processor's rules apply to each sampled row in turn; drafts would bypass them.
    if (!drafter_ || !s->decoding() || s->processor) continue;
    const SamplingParams& p = s->request->input->sampling;
    // Room: drafts past max_tokens or the context would be wasted work.
    const int64_t room = std::min<int64_t>(p.max_tokens - s->num_generated - 1, max_context_ - int64_t(s->tokens.size()));
    const int k = int(std::min<int64_t>(knobs_.num_speculative_tokens, room));
    if (k <= 0) continue;
    s->draft = drafter_->propose(s->tokens, k);
    if (int(s->draft.size()) > k) s->draft.resize(size_t(k));
  }
}

RunningView GenerateEngine::running_view(const Sequence& s) const {
  RunningView v;
  v.id = s.id;
  v.num_computed = s.num_computed;
  v.num_pending = s.num_uncomputed() + int64_t(s.draft.size());
  v.num_blocks = int(s.blocks.size());
  const size_t next = size_t(s.num_computed / pool_->block_size());
  v.copy_blocks = next < s.blocks.size() && pool_->ref_count(s.blocks[next]) > 1 ? 1 : 0;
  for (int b : s.blocks) v.num_freeable_blocks += pool_->ref_count(b) == 1 ? 1 : 0;
  v.decoding = s.decoding();
  return v;
}

WaitingView GenerateEngine::waiting_view(Sequence& s) const {
  WaitingView v;
  v.id = s.id;
  v.num_tokens = int64_t(s.tokens.size());
  v.num_seqs = 1 + (s.choice == 0 ? s.request->pending_forks : 0);
  if (!pool_->prefix_caching() || !looks_up_prefix(s)) return v;
  // NOTE: the last token is always computed (its logits are needed), so at most
  // (num_tokens - 1) / block_size blocks can come from the cache.
  if (s.lookup_hashes.empty())
    s.lookup_hashes =
        hash_full_blocks(s.tokens, pool_->block_size(), (v.num_tokens - 1) / pool_->block_size(), media_seeds(s));
  for (uint64_t h : s.lookup_hashes) {
    const std::optional<int> b = pool_->lookup(h);
    if (!b) break;
    v.num_cached += pool_->block_size();
    v.num_cached_unreferenced += pool_->ref_count(*b) == 0 ? 1 : 0;
  }
  return v;
}

bool GenerateEngine::looks_up_prefix(const Sequence& s) const {
  return !s.request->input->audio && s.request->probe_position < 0;
}

// NOTE: a speech request's cross-attention memory stays in its RequestState: recomputation
// attends the same memory without encoding the audio again.
void GenerateEngine::preempt(Sequence& s) {
  release_blocks(s);
  s.num_computed = 0;
  s.draft.clear();
  s.lookup_hashes.clear();
  std::erase(running_, &s);
  waiting_.push_front(&s);
  metrics_.preemptions.inc();
}

void GenerateEngine::admit(Sequence& s) {
  std::erase(waiting_, &s);
  running_.push_back(&s);
  int64_t hit = 0;
  if (pool_->prefix_caching() && looks_up_prefix(s)) {
    for (uint64_t h : s.lookup_hashes) {
      const std::optional<int> b = pool_->lookup(h);
      if (!b) break;
      pool_->retain(*b);
      s.blocks.push_back(*b);
      s.last_hash = h;
      hit += pool_->block_size();
    }
    s.num_published = int(s.blocks.size());
    metrics_.prefix_queried.inc(double(s.tokens.size()));
    metrics_.prefix_hit.inc(double(hit));
  }
  s.lookup_hashes.clear();
  s.num_computed = hit;
  RequestState& rs = *s.request;
  if (!rs.scheduled) {
    rs.scheduled = true;
    rs.cached_prompt_tokens = hit;
    metrics_.queue.observe(seconds_between(rs.request->enqueue_time(), Clock::now()));
  }
}

bool GenerateEngine::grow(Sequence& s, int64_t n) {
  const int bs = pool_->block_size();
  const size_t next = size_t(s.num_computed / bs);
  if (next < s.blocks.size() && pool_->ref_count(s.blocks[next]) > 1) {
    // NOTE: copy on write: the next token lands in a block another sequence shares (the
    // partial last prompt block after an n > 1 fork); this sequence takes a private copy.
    const std::optional<int> fresh = pool_->allocate();
    if (!fresh) return false;
    kv_.copy_block(s.blocks[next], *fresh);
    pool_->release(s.blocks[next]);
    s.blocks[next] = *fresh;
  }
  while (int64_t(s.blocks.size()) * bs < s.num_computed + n) {
    const std::optional<int> b = pool_->allocate();
    if (!b) return false;
    s.blocks.push_back(*b);
  }
  return true;
}

// NOTE: one step = plan (pure) → apply (preempt, admit with prefix hits, grow) → one forward
// over every scheduled sequence → advance each (sample, verify drafts, stop checks) → stream
// and retire. Tensors live in the step's arena, reset at the end of the step.
void GenerateEngine::step() {
  propose_drafts();
  std::vector<RunningView> rviews;
  rviews.reserve(running_.size());
  for (const Sequence* s : running_) rviews.push_back(running_view(*s));
  std::vector<WaitingView> wviews;
  for (Sequence* s : waiting_) {
    wviews.push_back(waiting_view(*s));
    if (int(wviews.size()) >= limits_.max_running) break;  // admission never goes further
  }
  SchedulerLimits lim = limits_;
  for (const Sequence* s : running_) lim.max_running -= s->choice == 0 ? s->request->pending_forks : 0;
  const StepPlan plan = plan_step(rviews, wviews, pool_->num_free(), lim);

  std::vector<StepItem> items = apply_plan(plan);
  if (media_encoder_) acquire_media(items);
  if (speech_encoder_) acquire_cross(items);
  if (items.empty()) {
    update_gauges();
    return;
  }
  build_batch(items);
  forward_and_sample(items);
  if (media_encoder_) release_media_rows();
  emit_and_retire();
  update_gauges();
}

std::vector<GenerateEngine::StepItem> GenerateEngine::apply_plan(const StepPlan& plan) {
  for (int64_t id : plan.preempted) preempt(*by_id_.at(id));
  for (const ScheduledSeq& a : plan.admitted) admit(*by_id_.at(a.id));
  std::vector<StepItem> items;
  for (const auto* list : {&plan.running, &plan.admitted})
    for (const ScheduledSeq& sc : *list) {
      Sequence& s = *by_id_.at(sc.id);
      // Admission may have hit more of the cache than planned (never less: nothing was
      // allocated in between): compute only what is left.
      const int64_t n = std::min(sc.num_tokens, s.num_uncomputed() + int64_t(s.draft.size()));
      if (!grow(s, n)) {
        // Defensive: the plan's block count was off. Recompute this one later.
        PRISM_LOG_WARN("deployment {}: KV block accounting was short; preempting a sequence", config_.name);
        preempt(s);
        continue;
      }
      if (n <= s.num_uncomputed()) s.draft.clear();
      else s.draft.resize(size_t(n - s.num_uncomputed()));
      items.push_back({&s, n, 0});
    }
  return items;
}

// NOTE: an item is needed when one of its rows lies at or after a planned sequence's
// num_computed (a prefix hit over an image's blocks makes it unneeded: a second turn about the
// same image neither looks it up nor encodes it).
std::vector<GenerateEngine::MediaNeed> GenerateEngine::media_needs(std::span<const StepItem> items) const {
  std::vector<MediaNeed> needs;
  for (const StepItem& it : items) {
    RequestState& rs = *it.seq->request;
    if (it.seq->num_computed >= rs.media.end) continue;
    for (size_t k = 0; k < rs.media_held.size(); ++k) {
      if (rs.media_held[k] || rs.media.item_last_position[k] < it.seq->num_computed) continue;
      if (std::any_of(needs.begin(), needs.end(), [&](const MediaNeed& n) { return n.rs == &rs && n.item == k; }))
        continue;
      needs.push_back({&rs, k});
    }
  }
  return needs;
}

Status GenerateEngine::place_media_rows(const MediaNeed& n, const encode::MediaFeatures& features) {
  RequestState& rs = *n.rs;
  const int64_t hidden = decoder_->hidden_size();
  if (rs.media_rows.empty()) rs.media_rows.assign(size_t(rs.media.num_rows() * hidden), 0.0f);
  const MediaItem& item = rs.input->media[n.item];
  const std::span<float> out(rs.media_rows.data() + rs.media.item_first_row[n.item] * hidden,
                             size_t(item.num_rows * hidden));
  if (Status st = pool_media_rows(features, item, media_encoder_->grid_side(), out); !st.ok())
    return invalid_argument("media item " + std::to_string(n.item) + ": " + st.message());
  rs.media_held[n.item] = 1;
  return {};
}

// NOTE: every miss of the step goes into one encoder run (batched across requests); items
// with the same key are encoded once, counted as encoded by the request that asked first.
void GenerateEngine::acquire_media(std::vector<StepItem>& items) {
  const std::vector<MediaNeed> needs = media_needs(items);
  if (needs.empty()) return;
  encode::MediaCache& cache = encode::MediaCache::shared();
  std::vector<std::pair<RequestState*, Status>> failed;
  auto fail = [&](RequestState* rs, Status st) {
    for (const auto& f : failed)
      if (f.first == rs) return;
    failed.emplace_back(rs, std::move(st));
  };

  // Cache lookups; the misses grouped by key.
  std::vector<const media::PixelViews*> missing;
  std::vector<media::MediaKey> missing_keys;
  std::vector<std::vector<MediaNeed>> waiting_for;  // per missing item
  for (const MediaNeed& n : needs) {
    const MediaItem& item = n.rs->input->media[n.item];
    vlm_metrics_->cache_lookups.inc();
    if (encode::MediaFeaturesPtr f = cache.find(encoder_id_, item.key)) {
      vlm_metrics_->cache_hits.inc();
      if (Status st = place_media_rows(n, *f); !st.ok()) fail(n.rs, std::move(st));
      continue;
    }
    const auto at = std::find(missing_keys.begin(), missing_keys.end(), item.key);
    if (at != missing_keys.end()) {
      waiting_for[size_t(at - missing_keys.begin())].push_back(n);
      continue;
    }
    missing.push_back(item.views.get());
    missing_keys.push_back(item.key);
    waiting_for.push_back({n});
  }

  if (!missing.empty()) {
    encode::MediaEncodeStats stats;
    Result<std::vector<encode::MediaFeaturesPtr>> encoded = [&] {
      ComputeTurn turn(compute_, threads_);
      return media_runner_->encode(missing, &stats);
    }();
    if (!encoded.has_value()) {
      PRISM_LOG_ERROR("deployment {}: {}", config_.name, encoded.status().message());
      for (const auto& group : waiting_for)
        for (const MediaNeed& n : group) fail(n.rs, encoded.status());
    } else {
      const double per_item = stats.seconds / double(missing.size());
      for (size_t m = 0; m < missing.size(); ++m) {
        vlm_metrics_->encoder_seconds.observe(per_item);
        cache.insert(encoder_id_, missing_keys[m], encoded.value()[m]);
        ++waiting_for[m].front().rs->encoded_media;
        for (const MediaNeed& n : waiting_for[m])
          if (Status st = place_media_rows(n, *encoded.value()[m]); !st.ok()) fail(n.rs, std::move(st));
      }
    }
  }
  vlm_metrics_->cache_bytes.set(double(cache.stats().bytes));

  if (failed.empty()) return;
  // NOTE: the failed requests' sequences leave the step before their state is freed.
  std::erase_if(items, [&](const StepItem& it) {
    return std::any_of(failed.begin(), failed.end(), [&](const auto& f) { return f.first == it.seq->request; });
  });
  for (const auto& [rs, st] : failed) remove_request(rs, &st);
}

void GenerateEngine::release_media_rows() {
  for (auto& rs : requests_) {
    if (rs->media_rows.empty()) continue;
    const bool needed = std::any_of(rs->choices.begin(), rs->choices.end(), [&](const auto& s) {
      return !s->finished && s->num_computed < rs->media.end &&
             std::find(running_.begin(), running_.end(), s.get()) != running_.end();
    });
    if (needed) continue;
    rs->media_rows = {};
    std::fill(rs->media_held.begin(), rs->media_held.end(), 0);
  }
}

// NOTE: the segments of every request admitted this step are encoded together: one call per
// distinct frame count (the encoder's input is [B, mels, F]), at most max_encoder_segments
// segments each, in admission order. A request is encoded once: choices, forks and
// recomputations after preemption share its memory.
void GenerateEngine::acquire_cross(std::vector<StepItem>& items) {
  std::vector<RequestState*> need;
  std::vector<int64_t> frame_counts;  // distinct, in admission order
  for (const StepItem& it : items) {
    RequestState* rs = it.seq->request;
    if (!rs->input->audio || rs->cross || std::find(need.begin(), need.end(), rs) != need.end()) continue;
    need.push_back(rs);
    const int64_t frames = rs->input->audio->frames;
    if (std::find(frame_counts.begin(), frame_counts.end(), frames) == frame_counts.end())
      frame_counts.push_back(frames);
  }
  if (need.empty()) return;
  std::vector<std::pair<RequestState*, Status>> failed;
  for (const int64_t frames : frame_counts) {
    std::vector<RequestState*> group;
    for (RequestState* rs : need)
      if (rs->input->audio->frames == frames) group.push_back(rs);
    const size_t most = size_t(knobs_.max_encoder_segments);
    for (size_t at = 0; at < group.size(); at += most) {
      const auto call = std::span<RequestState* const>(group).subspan(at, std::min(group.size() - at, most));
      std::vector<const float*> features;
      for (const RequestState* rs : call) features.push_back(rs->input->audio->features->data());
      double seconds = 0;
      Result<std::vector<std::shared_ptr<const models::CrossKv>>> cross = encode_segments(features, frames, &seconds);
      speech_metrics_->encoder_seconds.observe(seconds);
      if (!cross.has_value()) {
        PRISM_LOG_ERROR("deployment {}: {}", config_.name, cross.status().message());
        for (RequestState* rs : call) failed.emplace_back(rs, cross.status());
        continue;
      }
      speech_metrics_->segments.inc(double(call.size()));
      for (size_t k = 0; k < call.size(); ++k) call[k]->cross = std::move(cross.value()[k]);
    }
  }
  if (failed.empty()) return;
  // NOTE: the failed requests' sequences leave the step before their state is freed.
  std::erase_if(items, [&](const StepItem& it) {
    return std::any_of(failed.begin(), failed.end(), [&](const auto& f) { return f.first == it.seq->request; });
  });
  for (const auto& [rs, st] : failed) remove_request(rs, &st);
}

Result<std::vector<std::shared_ptr<const models::CrossKv>>> GenerateEngine::encode_segments(
    std::span<const float* const> features, int64_t frames, double* seconds) {
  const int64_t mels = speech_encoder_->num_mel_bins(), per_segment = mels * frames;
  const int64_t B = int64_t(features.size());
  const float* input = features[0];
  if (B > 1) {
    speech_input_.resize(size_t(B * per_segment));
    for (int64_t b = 0; b < B; ++b)
      std::copy(features[size_t(b)], features[size_t(b)] + per_segment, speech_input_.begin() + b * per_segment);
    input = speech_input_.data();
  }
  std::vector<std::shared_ptr<const models::CrossKv>> cross;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  {
    ArenaScope scope(&speech_arena_);
    // The encoder only reads its input.
    const Tensor x = Tensor::from_blob(const_cast<float*>(input), {B, mels, frames}, DType::f32);
    try {
      ComputeTurn turn(compute_, threads_);
      cross = speech_encoder_->encode(x);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (error.empty() && int64_t(cross.size()) != B)
    error = "the speech encoder returned " + std::to_string(cross.size()) + " memories for " + std::to_string(B) +
            " segments";
  for (size_t b = 0; error.empty() && b < cross.size(); ++b) {
    if (cross[b] == nullptr || cross[b]->frames != frames / 2 || cross[b]->k.size() != cross[b]->v.size()) {
      error = "the speech encoder returned a malformed memory for a segment of " + std::to_string(frames) + " frames";
      break;
    }
    // NOTE: the memory outlives this call's arena: tensors the encoder drew from it (no owner)
    // are copied to the heap, outside the scope.
    auto borrowed = [](const Tensor& t) { return t.defined() && t.owner() == nullptr; };
    const models::CrossKv& c = *cross[b];
    if (std::none_of(c.k.begin(), c.k.end(), borrowed) && std::none_of(c.v.begin(), c.v.end(), borrowed)) continue;
    auto owned = std::make_shared<models::CrossKv>();
    owned->frames = c.frames;
    for (const Tensor& t : c.k) owned->k.push_back(borrowed(t) ? t.clone() : t);
    for (const Tensor& t : c.v) owned->v.push_back(borrowed(t) ? t.clone() : t);
    cross[b] = std::move(owned);
  }
  speech_arena_.reset();
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!error.empty()) return internal_error("speech encoding failed: " + error);
  return cross;
}

// The flat batch in batch_*_ (host vectors; tensors are made from them in the step's arena).
// Sets each item's logits row count.
void GenerateEngine::build_batch(std::vector<StepItem>& items) {
  const int bs = pool_->block_size();
  size_t max_blocks = 1;
  for (const StepItem& it : items) max_blocks = std::max(max_blocks, it.seq->blocks.size());
  batch_tokens_.clear();
  batch_positions_.clear();
  batch_slots_.clear();
  batch_rows_.clear();
  batch_cu_.assign(1, 0);
  batch_ctx_.clear();
  batch_media_.clear();
  batch_tables_.assign(items.size() * max_blocks, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    Sequence& s = *items[i].seq;
    const int64_t n = items[i].n;
    const int64_t real = std::min(n, s.num_uncomputed());
    const RequestState& rs = *s.request;
    const int64_t hidden = decoder_->hidden_size();
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = s.num_computed + j;
      int32_t tok = j < real ? s.tokens[size_t(pos)] : s.draft[size_t(j - real)];
      // NOTE: only prompt positions take media rows (row_of covers the prompt); a generated
      // image token id stays a token.
      if (pos < rs.media.end && rs.media.row_of[size_t(pos)] >= 0) {
        PRISM_CHECK(!rs.media_rows.empty());
        batch_media_.emplace_back(int32_t(batch_tokens_.size()),
                                  rs.media_rows.data() + rs.media.row_of[size_t(pos)] * hidden);
        tok = -1;
      }
      batch_tokens_.push_back(tok);
      batch_positions_.push_back(int32_t(pos));
      batch_slots_.push_back(int32_t(s.blocks[size_t(pos / bs)] * bs + pos % bs));
    }
    const int64_t begin = int64_t(batch_tokens_.size()) - n;  // the item's first row in the batch
    const bool reaches_end = real == s.num_uncomputed();
    // Choice 0's processor wants one prompt row's logits when this chunk computes it.
    items[i].probe = ProbeRow::none;
    if (s.choice == 0 && s.processor && rs.probe_position >= s.num_computed &&
        rs.probe_position < s.num_computed + real) {
      const bool sampled = reaches_end && rs.probe_position == s.num_computed + real - 1;
      items[i].probe = sampled ? ProbeRow::sampled : ProbeRow::extra;
      if (!sampled) batch_rows_.push_back(int32_t(begin + rs.probe_position - s.num_computed));
    }
    // Logits for the last real token and every draft, when the chunk reaches the end.
    if (reaches_end) {
      for (int64_t r = begin + real - 1; r < int64_t(batch_tokens_.size()); ++r) batch_rows_.push_back(int32_t(r));
      items[i].rows = n - real + 1;
    }
    batch_cu_.push_back(int32_t(batch_tokens_.size()));
    batch_ctx_.push_back(int32_t(s.num_computed + n));
    std::copy(s.blocks.begin(), s.blocks.end(), batch_tables_.begin() + ptrdiff_t(i * max_blocks));
  }
  batch_max_blocks_ = int64_t(max_blocks);
  metrics_.step_tokens.observe(double(batch_tokens_.size()));
}

void GenerateEngine::forward_and_sample(std::span<const StepItem> items) {
  {
    ArenaScope scope(&arena_);
    const int64_t T = int64_t(batch_tokens_.size()), S = int64_t(items.size());
    const int64_t max_blocks = batch_max_blocks_;
    models::DecoderBatch b;
    b.token_ids = Tensor::from<int32_t>(batch_tokens_, {T});
    b.positions = Tensor::from<int32_t>(batch_positions_, {T});
    b.slot_mapping = Tensor::from<int32_t>(batch_slots_, {T});
    b.cu_seqlens_q = Tensor::from<int32_t>(batch_cu_, {S + 1});
    b.context_lens = Tensor::from<int32_t>(batch_ctx_, {S});
    b.block_tables = Tensor::from<int32_t>(batch_tables_, {S, max_blocks});
    b.logits_rows = Tensor::from<int32_t>(batch_rows_, {int64_t(batch_rows_.size())});
    if (speech_encoder_) {
      b.cross.reserve(size_t(S));
      for (const StepItem& it : items) {
        PRISM_CHECK(it.seq->request->cross != nullptr);  // acquire_cross gave every planned request one
        b.cross.push_back(it.seq->request->cross.get());
      }
    }
    if (!batch_media_.empty()) {
      const int64_t hidden = decoder_->hidden_size();
      b.input_embeddings = Tensor::zeros({T, hidden}, DType::f32);
      float* dst = b.input_embeddings.data<float>();
      for (const auto& [row, src] : batch_media_) std::copy(src, src + hidden, dst + row * hidden);
    }
    Tensor logits;
    std::string error;
    // The turn covers the forward and the sampling (both run on the replica's team); it ends
    // before any request is completed.
    std::optional<ComputeTurn> turn(std::in_place, compute_, threads_);
    try {
      logits = decoder_->forward(b, kv_.layers());
    } catch (const std::exception& e) {
      error = e.what();
    }
    const bool bad_shape = !batch_rows_.empty() && (!logits.defined() || logits.dim() != 2 ||
                                                    logits.size(0) != int64_t(batch_rows_.size()) ||
                                                    logits.size(1) != vocab_ || logits.dtype() != DType::f32);
    if (!error.empty() || bad_shape) {
      turn.reset();
      if (error.empty()) error = "the decoder returned " + logits.to_string() + " logits";
      PRISM_LOG_ERROR("deployment {}: decoder step failed: {}", config_.name, error);
      const Status st = internal_error("generation failed: " + error);
      std::vector<RequestState*> failed;
      for (const StepItem& it : items)
        if (std::find(failed.begin(), failed.end(), it.seq->request) == failed.end()) failed.push_back(it.seq->request);
      for (RequestState* rs : failed) remove_request(rs, &st);
      arena_.reset();
      return;
    }
    Tensor rows = batch_rows_.empty() ? Tensor() : logits.contiguous();
    sample_step(items, batch_rows_.empty() ? nullptr : rows.data<float>());
  }
  arena_.reset();
}

// ------------------------------------------------------------------------------------------
// After the forward

// NOTE: three passes over the step's sequences. (1) Sequential: count the computed tokens,
// hand probe rows to their processors, fork the choices of requests whose prefill just ended
// (each fork processes and samples its own copy of choice 0's raw row before choice 0 samples
// in place). (2) Parallel over sequences: process (the choice's logit rules, on the raw row),
// then sample or verify (samplers and processors are per sequence and share nothing).
// (3) Sequential: roll back rejected drafts, stop checks, detokenize, publish full blocks.
void GenerateEngine::sample_step(std::span<const StepItem> items, float* logits) {
  std::vector<float*> rows(items.size(), nullptr);
  for (size_t i = 0; i < items.size(); ++i) {
    Sequence& s = *items[i].seq;
    s.num_computed += items[i].n;
    if (items[i].probe == ProbeRow::extra) {
      s.processor->probe(std::span<const float>(logits, size_t(vocab_)));
      logits += vocab_;
    }
    if (items[i].rows == 0) continue;  // a prefill chunk short of the end: nothing to sample
    rows[i] = logits;
    logits += items[i].rows * vocab_;
    if (items[i].probe == ProbeRow::sampled) s.processor->probe(std::span<const float>(rows[i], size_t(vocab_)));
    RequestState& rs = *s.request;
    if (s.choice != 0 || rs.pending_forks == 0) continue;
    fork_choices(s);
    const std::span<const float> row(rows[i], size_t(vocab_));
    for (size_t c = 1; c < rs.choices.size(); ++c) {
      Sequence& f = *rs.choices[c];
      std::vector<float> copy(row.begin(), row.end());
      if (f.processor) f.processor->process(copy, {});
      add_token(f, f.sampler->sample(copy));
      publish_full_blocks(f);
    }
  }
  sampled_.resize(items.size());
  parallel_for(int64_t(items.size()), 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Sequence& s = *items[size_t(i)].seq;
      std::vector<SampledToken>& out = sampled_[size_t(i)];
      out.clear();
      if (rows[size_t(i)] == nullptr) continue;
      const std::span<float> row(rows[size_t(i)], size_t(vocab_));
      if (s.processor) {
        PRISM_CHECK(s.draft.empty());  // propose_drafts skips sequences with a processor
        const size_t prompt = s.request->input->prompt.size();
        s.processor->process(row, std::span<const int32_t>(s.tokens).subspan(prompt));
      }
      if (s.draft.empty()) out.push_back(s.sampler->sample(row));
      else out = s.sampler->verify(std::span<float>(rows[size_t(i)], size_t(items[size_t(i)].rows * vocab_)), vocab_, s.draft);
    }
  });
  for (size_t i = 0; i < items.size(); ++i) {
    if (rows[i] == nullptr) continue;
    Sequence& s = *items[i].seq;
    const int64_t drafts = int64_t(s.draft.size());
    if (drafts > 0) {
      const int64_t accepted = int64_t(sampled_[i].size()) - 1;
      metrics_.draft_tokens.inc(double(drafts));
      metrics_.accepted_tokens.inc(double(accepted));
      // NOTE: the K/V of rejected drafts stays in its slots until later tokens overwrite
      // them; num_computed counts only accepted ones, so they are never read or published.
      s.num_computed -= drafts - accepted;
      s.draft.clear();
    }
    for (const SampledToken& t : sampled_[i])
      if (!add_token(s, t)) break;
    publish_full_blocks(s);
  }
}

// NOTE: the n choices of a request share choice 0's prompt blocks (ref counted); the
// partially filled last block is shared too until a choice writes into it (copy on write in
// grow). Forks are made when choice 0's prefill ends, before any choice samples.
void GenerateEngine::fork_choices(Sequence& first) {
  RequestState& rs = *first.request;
  const SamplingParams& p = rs.input->sampling;
  for (int c = 1; c <= rs.pending_forks; ++c) {
    std::unique_ptr<Sequence> f = new_sequence(rs, c);
    f->tokens = first.tokens;
    f->num_computed = first.num_computed;
    f->blocks = first.blocks;
    for (int b : f->blocks) pool_->retain(b);
    f->num_published = first.num_published;
    f->last_hash = first.last_hash;
    f->sampler = std::make_unique<SequenceSampler>(p, choice_seed(p, c), rs.input->prompt);
    // NOTE: each choice has its own processor (its rules track its own tokens); forks do not
    // see choice 0's probe.
    if (rs.input->logits_processor) f->processor = rs.input->logits_processor(c);
    const size_t tail = std::min(rs.input->prompt.size(), kDetokenizerPromptTail);
    f->detokenizer = std::make_unique<IncrementalDetokenizer>(
        frontend_->tokenizer(), std::span<const int32_t>(rs.input->prompt).last(tail), p.stop,
        /*skip_special_tokens=*/true, p.min_tokens);
    running_.push_back(f.get());
    rs.choices.push_back(std::move(f));
  }
  rs.pending_forks = 0;
}

bool GenerateEngine::add_token(Sequence& s, const SampledToken& t) {
  RequestState& rs = *s.request;
  const SamplingParams& p = rs.input->sampling;
  const auto now = Clock::now();
  if (!rs.first_token) {
    rs.first_token = true;
    metrics_.ttft.observe(seconds_between(rs.request->enqueue_time(), now));
  } else if (s.num_generated > 0) {
    metrics_.itl.observe(seconds_between(s.last_token_time, now));
  }
  s.last_token_time = now;
  ++s.num_generated;
  metrics_.generation_tokens.inc();
  s.tokens.push_back(t.token);

  // NOTE: stop tokens and strings count only after min_tokens output tokens.
  const bool may_stop = s.num_generated > p.min_tokens;
  const auto& eos = frontend_->eos_token_ids();
  const bool is_eos = !p.ignore_eos && std::find(eos.begin(), eos.end(), t.token) != eos.end();
  const bool is_stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) != p.stop_token_ids.end();
  if (may_stop && (is_eos || is_stop_id)) {
    s.output.text += s.detokenizer->finish();
    finish(s, FinishReason::stop);
    return false;
  }
  const IncrementalDetokenizer::Step d = s.detokenizer->push(t.token);
  s.output.text += d.text;
  s.output.tokens.push_back(t.token);
  if (p.logprobs) s.output.logprobs.push_back(t.logprobs);
  if (d.stopped) {
    finish(s, FinishReason::stop);
    return false;
  }
  if (s.num_generated >= p.max_tokens || int64_t(s.tokens.size()) >= max_context_) {
    s.output.text += s.detokenizer->finish();
    finish(s, FinishReason::length);
    return false;
  }
  return true;
}

void GenerateEngine::finish(Sequence& s, FinishReason reason) {
  s.finished = true;
  s.output.finish = reason;
  s.draft.clear();
  // Blocks go back at once (published ones stay cached for later prompts).
  publish_full_blocks(s);
  release_blocks(s);
  std::erase(running_, &s);
  std::erase(waiting_, &s);
  ++s.request->num_finished;
}

void GenerateEngine::publish_full_blocks(Sequence& s) {
  // NOTE: blocks computed against audio are keyed by more than their ids: never published.
  if (!pool_->prefix_caching() || s.request->input->audio) return;
  const int bs = pool_->block_size();
  // NOTE: only blocks whose every position is below num_computed hold final tokens' K/V.
  while (int64_t(s.num_published + 1) * bs <= s.num_computed && size_t(s.num_published) < s.blocks.size()) {
    const size_t start = size_t(s.num_published) * size_t(bs);
    const std::span<const uint64_t> seeds = media_seeds(s);
    s.last_hash = hash_block(s.last_hash, std::span<const int32_t>(s.tokens).subspan(start, size_t(bs)),
                             start < seeds.size() ? seeds.subspan(start, std::min(seeds.size() - start, size_t(bs)))
                                                  : std::span<const uint64_t>());
    pool_->publish(s.blocks[size_t(s.num_published)], s.last_hash);
    ++s.num_published;
  }
}

void GenerateEngine::emit_and_retire() {
  std::vector<RequestState*> done;
  for (auto& rs_ptr : requests_) {
    RequestState& rs = *rs_ptr;
    if (rs.request->on_partial) {
      auto chunk = std::make_unique<GenerateChunk>();
      for (auto& s : rs.choices) {
        const bool new_text = s->output.text.size() > s->streamed_text;
        const bool new_tokens = s->output.tokens.size() > s->streamed_tokens;
        const bool newly_finished = s->finished && !s->finish_streamed;
        if (!new_text && !new_tokens && !newly_finished) continue;
        ChoiceDelta d;
        d.index = s->choice;
        d.text = s->output.text.substr(s->streamed_text);
        d.tokens.assign(s->output.tokens.begin() + ptrdiff_t(s->streamed_tokens), s->output.tokens.end());
        if (s->output.logprobs.size() > s->streamed_tokens)
          d.logprobs.assign(s->output.logprobs.begin() + ptrdiff_t(s->streamed_tokens), s->output.logprobs.end());
        s->streamed_tokens = s->output.tokens.size();
        s->streamed_text = s->output.text.size();
        if (s->finished) {
          d.finish = s->output.finish;
          s->finish_streamed = true;
        }
        chunk->deltas.push_back(std::move(d));
      }
      if (!chunk->deltas.empty()) rs.request->emit(serving::PayloadPtr(std::move(chunk)));
    }
    if (rs.pending_forks == 0 && rs.num_finished == int(rs.choices.size())) done.push_back(&rs);
  }
  for (RequestState* rs : done) complete(*rs);
}

void GenerateEngine::complete(RequestState& rs) {
  const RequestPtr request = rs.request;
  auto out = std::make_unique<GenerateOutput>();
  out->prompt_tokens = int64_t(rs.input->prompt.size());
  out->cached_prompt_tokens = rs.cached_prompt_tokens;
  out->encoded_media = rs.encoded_media;
  for (auto& s : rs.choices) {
    out->completion_tokens += s->num_generated;
    out->choices.push_back(std::move(s->output));
  }
  std::sort(out->choices.begin(), out->choices.end(),
            [](const ChoiceDelta& a, const ChoiceDelta& b) { return a.index < b.index; });
  metrics_.e2e.observe(seconds_between(request->enqueue_time(), Clock::now()));
  remove_request(&rs, nullptr);
  update_gauges();
  request->complete(serving::PayloadPtr(std::move(out)));
}

}  // namespace

serving::EngineFactory generate_engine_factory(DecoderLoader loader, MediaEncoderLoader media_loader,
                                               SpeechEncoderLoader speech_loader) {
  return [loader, media_loader, speech_loader](
             const serving::EngineContext& context) -> Result<std::unique_ptr<serving::Engine>> {
    auto frontend = std::dynamic_pointer_cast<const GenerateFrontend>(context.frontend);
    if (frontend == nullptr) return internal_error("a generate deployment needs its GenerateFrontend");
    if (!loader) return internal_error("a generate deployment needs a decoder loader");
    return std::unique_ptr<serving::Engine>(
        std::make_unique<GenerateEngine>(context, std::move(frontend), loader, media_loader, speech_loader));
  };
}

serving::FrontendFactory generate_frontend_factory() {
  return [](const serving::DeploymentConfig& config) -> Result<serving::FrontendPtr> {
    PRISM_ASSIGN_OR_RETURN(std::shared_ptr<const GenerateFrontend> fe, GenerateFrontend::load(config));
    return serving::FrontendPtr(std::move(fe));
  };
}

}  // namespace prism::engines::generate

// engines/generate/generate_engine.cpp: the continuous-batching loop of tasks "chat" and
// "transcribe", as a core plus stages. Between steps: take new requests, drop cancelled and
// expired ones, plan the step (scheduler.h), apply it to the block pool; the input stages
// (input_stage.h) give the planned sequences what the forward needs besides token ids (a VLM's
// media rows, a speech model's cross-attention memory); then one Decoder::forward over the
// flat batch, logits processors, sampling (or draft verification), stop checks, the output
// stage (output_stage.h: text through the detokenizer), streaming and completion. Every
// model call (forward and sampling, the stages' encodes, warm-ups) runs inside a ComputeTurn
// (engines/compute_turn.h): deployments take turns on the one compute pool. It must not:
// tokenize, preprocess or compute log-mel features (the api's threads do), see HTTP, start
// threads, hold a turn across anything but compute, or branch on a modality (a stage does).
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
#include "engines/generate/cross_input.h"
#include "engines/generate/generate_engine_factory.h"
#include "engines/generate/generate_knobs.h"
#include "engines/generate/generate_metrics.h"
#include "engines/generate/input_stage.h"
#include "engines/generate/kv_block_pool.h"
#include "engines/generate/kv_cache.h"
#include "engines/generate/media_input.h"
#include "engines/generate/scheduler.h"
#include "engines/generate/sequence.h"
#include "engines/generate/speculation.h"
#include "engines/generate/text_output.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "runtime/arena.h"
#include "runtime/threads.h"
#include "serving/config.h"

namespace prism::engines::generate {
namespace {

using serving::Clock;
using serving::RequestPtr;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

class GenerateEngine final : public serving::Engine {
 public:
  GenerateEngine(const serving::EngineContext& context, std::shared_ptr<const frontends::GenerateFrontend> frontend,
                 DecoderLoader loader, MediaEncoderLoader media_loader, SpeechEncoderLoader speech_loader)
      : config_(context.config),
        frontend_(std::move(frontend)),
        loader_(std::move(loader)),
        media_loader_(std::move(media_loader)),
        speech_loader_(std::move(speech_loader)),
        replica_(context.replica),
        replicas_(context.replicas),
        registry_(context.metrics),
        labels_(context.labels),
        metrics_(context.metrics, context.labels),
        compute_(context.metrics, context.labels),
        output_(std::make_unique<TextOutput>(frontend_->tokenizer())),
        seed_rng_(std::random_device{}()) {}

  Status load() override;
  void serve(serving::BatchSource& source) override;
  nlohmann::json describe() const override;

 private:
  // ---- between steps ----
  void intake(std::vector<RequestPtr> requests);
  Status check(const serving::Request& r) const;
  // The input stages of the frontend's modalities, loaded after the decoder.
  Status load_inputs();
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
  // After the forward: advance each sequence by its computed tokens, sample (or verify its
  // drafts) from its rows ([sum rows, vocab] f32, in item order), check stops.
  void sample_step(std::span<const StepItem> items, float* logits);
  // Preempts, admits (taking prefix hits) and grows the planned sequences.
  std::vector<StepItem> apply_plan(const StepPlan& plan);
  // The input stages' acquire over the planned items; requests a stage fails are completed
  // with its error and leave `items`.
  void acquire_inputs(std::vector<StepItem>& items);
  // Whether every input stage keys the request's K/V by its tokens (input_stage.h): else its
  // blocks are neither looked up in nor published to the prefix cache.
  bool keys_kv_by_tokens(const RequestState& rs) const;
  // Whether a waiting sequence looks its prompt up in the prefix cache: when its K/V is keyed
  // by its tokens, and its processor probes no prompt row (a hit would skip the row).
  bool looks_up_prefix(const Sequence& s) const;
  void build_batch(std::vector<StepItem>& items);
  // One Decoder::forward over the batch, then sample_step; a decoder failure fails the
  // step's requests (the engine goes on).
  void forward_and_sample(std::span<const StepItem> items);
  void fork_choices(Sequence& first);
  // Records one sampled token; returns false when the choice finished.
  bool add_token(Sequence& s, const SampledToken& t);
  void finish(Sequence& s, frontends::FinishReason reason);
  void publish_full_blocks(Sequence& s);
  std::span<const uint64_t> media_seeds(const Sequence& s) const { return s.request->media.seeds; }
  void release_blocks(Sequence& s);
  // Streams the step's deltas and completes requests whose choices all finished.
  void emit_and_retire();
  void complete(RequestState& rs);
  void remove_request(RequestState* rs, const Status* status);
  void update_gauges();

  std::unique_ptr<Sequence> new_sequence(RequestState& rs, int choice);
  uint64_t choice_seed(const frontends::SamplingParams& p, int choice);

  const serving::DeploymentConfig& config_;  // not owned; outlives the engine
  std::shared_ptr<const frontends::GenerateFrontend> frontend_;
  DecoderLoader loader_;
  MediaEncoderLoader media_loader_;
  SpeechEncoderLoader speech_loader_;
  const int replica_;
  const int replicas_;
  serving::MetricsRegistry& registry_;  // not owned; the stages' series are registered at load
  const serving::Labels labels_;
  GenerateMetrics metrics_;
  ComputeMetrics compute_;
  EngineKnobs knobs_;
  ops::Precision precision_ = ops::Precision::f32;
  std::unique_ptr<models::Decoder> decoder_;
  // The stages of the frontend's modalities; media_ and cross_ point into inputs_ (or are null).
  std::vector<std::unique_ptr<InputStage>> inputs_;
  MediaInput* media_ = nullptr;
  CrossInput* cross_ = nullptr;
  std::unique_ptr<OutputStage> output_;
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
  PRISM_RETURN_IF_ERROR(load_inputs());
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
    for (const auto& stage : inputs_) stage->fill_warm_up(b);
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
  if (replica_ == 0)
    for (const auto& stage : inputs_) stage->log_loaded(config_.name);
  update_gauges();
  return {};
}

Status GenerateEngine::load_inputs() {
  const StageContext context{config_, precision_, *decoder_, compute_, threads_, registry_, labels_};
  if (const frontends::VisionProcessor* vision = frontend_->vision()) {
    PRISM_ASSIGN_OR_RETURN(std::unique_ptr<MediaInput> media,
                           MediaInput::load(context, media_loader_, vision->image_token_id(), knobs_.max_encoder_views));
    media_ = media.get();
    inputs_.push_back(std::move(media));
  }
  if (const frontends::SpeechProcessor* speech = frontend_->speech()) {
    PRISM_ASSIGN_OR_RETURN(std::unique_ptr<CrossInput> cross, CrossInput::load(context, speech_loader_,
                                                                               speech->num_mel_bins(),
                                                                               knobs_.max_encoder_segments));
    cross_ = cross.get();
    inputs_.push_back(std::move(cross));
  }
  return {};
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
  for (const auto& stage : inputs_) stage->describe(j);
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
  const auto* in = dynamic_cast<const frontends::GenerateInput*>(r.input.get());
  if (in == nullptr) return invalid_argument("the generate engine needs a frontends::GenerateInput payload");
  if (in->prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t id : in->prompt)
    if (id < 0 || id >= vocab_)
      return out_of_range("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                          std::to_string(vocab_) + ")");
  const frontends::SamplingParams& p = in->sampling;
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
  // A payload part no stage of this model takes is refused here; the stages check the rest.
  if (in->audio && cross_ == nullptr)
    return invalid_argument("this model does not take audio (deployment '" + config_.name +
                            "' serves a model without a speech encoder)");
  if (!in->media.empty() && media_ == nullptr)
    return invalid_argument("this model does not take images or videos (deployment '" + config_.name +
                            "' serves a text-only model)");
  for (const auto& stage : inputs_) PRISM_RETURN_IF_ERROR(stage->check(*in));
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

uint64_t GenerateEngine::choice_seed(const frontends::SamplingParams& p, int choice) {
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
    const auto* input = static_cast<const frontends::GenerateInput*>(r->input.get());
    std::unique_ptr<frontends::LogitsProcessor> processor;
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
    rs->input = input;
    Status admitted;
    for (const auto& stage : inputs_)
      if (admitted = stage->admit(*rs); !admitted.ok()) break;
    if (!admitted.ok()) {
      r->complete(std::move(admitted));
      continue;
    }
    rs->request = std::move(r);
    rs->pending_forks = rs->input->sampling.n - 1;
    rs->probe_position = probe < 0 ? -1 : probe;
    std::unique_ptr<Sequence> s = new_sequence(*rs, 0);
    const auto& prompt = rs->input->prompt;
    s->tokens = prompt;
    s->processor = std::move(processor);
    s->sampler = std::make_unique<SequenceSampler>(rs->input->sampling, choice_seed(rs->input->sampling, 0), prompt);
    output_->start(*s);
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
    const frontends::SamplingParams& p = s->request->input->sampling;
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

bool GenerateEngine::keys_kv_by_tokens(const RequestState& rs) const {
  return std::all_of(inputs_.begin(), inputs_.end(), [&](const auto& stage) { return stage->keys_kv_by_tokens(rs); });
}

bool GenerateEngine::looks_up_prefix(const Sequence& s) const {
  return keys_kv_by_tokens(*s.request) && s.request->probe_position < 0;
}

// NOTE: what the input stages gave a request (media rows aside, cross-attention memory) stays
// in its RequestState: recomputation uses it again without encoding.
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
  acquire_inputs(items);
  if (items.empty()) {
    update_gauges();
    return;
  }
  build_batch(items);
  forward_and_sample(items);
  for (const auto& stage : inputs_) stage->after_step(requests_, running_);
  emit_and_retire();
  update_gauges();
}

std::vector<StepItem> GenerateEngine::apply_plan(const StepPlan& plan) {
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

// NOTE: the failed requests' sequences leave the step before their state is freed.
void GenerateEngine::acquire_inputs(std::vector<StepItem>& items) {
  StageFailures failed;
  for (const auto& stage : inputs_) stage->acquire(items, failed);
  if (failed.empty()) return;
  std::erase_if(items, [&](const StepItem& it) {
    return std::any_of(failed.begin(), failed.end(), [&](const auto& f) { return f.first == it.seq->request; });
  });
  for (const auto& [rs, st] : failed) remove_request(rs, &st);
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
  batch_tables_.assign(items.size() * max_blocks, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    Sequence& s = *items[i].seq;
    const int64_t n = items[i].n;
    const int64_t real = std::min(n, s.num_uncomputed());
    const RequestState& rs = *s.request;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = s.num_computed + j;
      batch_tokens_.push_back(j < real ? s.tokens[size_t(pos)] : s.draft[size_t(j - real)]);
      batch_positions_.push_back(int32_t(pos));
      batch_slots_.push_back(int32_t(s.blocks[size_t(pos / bs)] * bs + pos % bs));
    }
    const int64_t begin = int64_t(batch_tokens_.size()) - n;  // the item's first row in the batch
    for (const auto& stage : inputs_)
      stage->place(rs, s.num_computed, int32_t(begin), std::span<int32_t>(batch_tokens_).subspan(size_t(begin)));
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
    for (const auto& stage : inputs_) stage->fill(items, T, b);
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
  const frontends::SamplingParams& p = rs.input->sampling;
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
    output_->start(*f);
    running_.push_back(f.get());
    rs.choices.push_back(std::move(f));
  }
  rs.pending_forks = 0;
}

bool GenerateEngine::add_token(Sequence& s, const SampledToken& t) {
  RequestState& rs = *s.request;
  const frontends::SamplingParams& p = rs.input->sampling;
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
    output_->flush(s);
    finish(s, frontends::FinishReason::stop);
    return false;
  }
  const bool stopped = output_->push(s, t.token);
  s.output.tokens.push_back(t.token);
  if (p.logprobs) s.output.logprobs.push_back(t.logprobs);
  if (stopped) {
    finish(s, frontends::FinishReason::stop);
    return false;
  }
  if (s.num_generated >= p.max_tokens || int64_t(s.tokens.size()) >= max_context_) {
    output_->flush(s);
    finish(s, frontends::FinishReason::length);
    return false;
  }
  return true;
}

void GenerateEngine::finish(Sequence& s, frontends::FinishReason reason) {
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
  // NOTE: blocks whose K/V an input stage keys by more than the tokens are never published.
  if (!pool_->prefix_caching() || !keys_kv_by_tokens(*s.request)) return;
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
      auto chunk = std::make_unique<frontends::GenerateChunk>();
      for (auto& s : rs.choices) {
        const bool new_text = s->output.text.size() > s->streamed_text;
        const bool new_tokens = s->output.tokens.size() > s->streamed_tokens;
        const bool newly_finished = s->finished && !s->finish_streamed;
        if (!new_text && !new_tokens && !newly_finished) continue;
        frontends::ChoiceDelta d;
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
  auto out = std::make_unique<frontends::GenerateOutput>();
  out->prompt_tokens = int64_t(rs.input->prompt.size());
  out->cached_prompt_tokens = rs.cached_prompt_tokens;
  out->encoded_media = rs.encoded_media;
  for (auto& s : rs.choices) {
    out->completion_tokens += s->num_generated;
    out->choices.push_back(std::move(s->output));
  }
  std::sort(out->choices.begin(), out->choices.end(),
            [](const frontends::ChoiceDelta& a, const frontends::ChoiceDelta& b) { return a.index < b.index; });
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
    auto frontend = std::dynamic_pointer_cast<const frontends::GenerateFrontend>(context.frontend);
    if (frontend == nullptr) return internal_error("a generate deployment needs its frontends::GenerateFrontend");
    if (!loader) return internal_error("a generate deployment needs a decoder loader");
    return std::unique_ptr<serving::Engine>(
        std::make_unique<GenerateEngine>(context, std::move(frontend), loader, media_loader, speech_loader));
  };
}

serving::FrontendFactory generate_frontend_factory() {
  return [](const serving::DeploymentConfig& config) -> Result<serving::FrontendPtr> {
    PRISM_ASSIGN_OR_RETURN(std::shared_ptr<const frontends::GenerateFrontend> fe, frontends::GenerateFrontend::load(config));
    return serving::FrontendPtr(std::move(fe));
  };
}

}  // namespace prism::engines::generate

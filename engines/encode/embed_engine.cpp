// engines/encode/embed_engine.cpp: the embed engine's loop (online first, bulk in chunks),
// its per-request checks and its metrics.
#include "engines/encode/embed_engine.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <numeric>

#include "base/log.h"
#include "engines/encode/embed_frontend.h"
#include "engines/encode/embed_payload.h"
#include "engines/encode/embedder.h"
#include "models/bert/bert.h"
#include "runtime/threads.h"
#include "serving/config.h"

namespace prism::engines::encode {
namespace {

using serving::RequestPtr;

constexpr double kPaddingBuckets[] = {0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8};

// The engine's series, shared by the replicas of a deployment (same labels, same series).
struct EmbedMetrics {
  explicit EmbedMetrics(serving::MetricsRegistry& m, const serving::Labels& l)
      : documents(m.counter("prism_embed_documents_total", "Documents (sequences) embedded; its rate is docs/s.", l)),
        tokens(m.counter("prism_embed_tokens_total", "Real (unpadded) tokens embedded.", l)),
        useful_flops(m.counter("prism_embed_useful_flops_total",
                               "Model FLOPs of the real tokens (padding excluded); its rate is useful FLOP/s.", l)),
        padding(m.histogram("prism_embed_padding_ratio",
                            "Padding fraction of each model call group: (padded - real) / padded tokens; 0 when packed.",
                            kPaddingBuckets, l)),
        batch_sequences(m.histogram("prism_embed_batch_sequences",
                                    "Sequences per embed call (an online batch or a bulk chunk).",
                                    serving::batch_size_buckets(), l)) {}

  void record(const EmbedStats& s) {
    if (s.sequences == 0) return;
    documents.inc(double(s.sequences));
    tokens.inc(double(s.real_tokens));
    useful_flops.inc(s.useful_flops);
    padding.observe(s.padded_tokens > 0 ? double(s.padded_tokens - s.real_tokens) / double(s.padded_tokens) : 0.0);
    batch_sequences.observe(double(s.sequences));
  }

  serving::Counter& documents;
  serving::Counter& tokens;
  serving::Counter& useful_flops;
  serving::Histogram& padding;
  serving::Histogram& batch_sequences;
};

// A bulk request being worked through chunk by chunk.
struct BulkJob {
  RequestPtr request;
  const EmbedInput* input = nullptr;  // owned by request
  std::vector<size_t> order;          // sequence indices, shortest first (less padding per chunk)
  size_t next = 0;                    // into order
  int64_t remaining_tokens = 0;
  std::unique_ptr<EmbedOutput> output;
  bool done() const { return next == order.size(); }
};

class EmbedEngine final : public serving::Engine {
 public:
  EmbedEngine(const serving::EngineContext& context, std::shared_ptr<const EmbedFrontend> frontend,
              EncoderLoader loader)
      : config_(context.config),
        frontend_(std::move(frontend)),
        loader_(std::move(loader)),
        replica_(context.replica),
        replicas_(context.replicas),
        metrics_(context.metrics, context.labels) {}

  Status load() override;
  void serve(serving::BatchSource& source) override;
  void run_batch(std::span<const RequestPtr> batch) override;
  nlohmann::json describe() const override;

 private:
  // Checks the payload against the frontend: a request the model cannot take fails alone.
  Status check(const serving::Request& r) const;
  // Takes requests from the queue: checks them, runs the online ones at once, queues the
  // bulk ones in bulk_.
  void admit(std::vector<RequestPtr> requests);
  void run_online(std::span<const RequestPtr> requests);
  // One chunk of about bulk_chunk_tokens from the front of bulk_; completes finished jobs.
  void run_bulk_chunk();
  // What waits in the queue now: every online request, and bulk ones while bulk_ is short.
  std::vector<RequestPtr> poll_waiting(serving::BatchSource& source);
  // Drops cancelled and expired jobs, completing them.
  void prune_bulk();
  // Runs the model; an exception (a library's) becomes an internal error for those requests.
  Status embed(std::span<const std::span<const int32_t>> sequences, int64_t dims, std::span<float> out);

  const serving::DeploymentConfig& config_;  // not owned; outlives the engine
  std::shared_ptr<const EmbedFrontend> frontend_;
  EncoderLoader loader_;
  const int replica_;
  const int replicas_;
  EmbedMetrics metrics_;
  std::unique_ptr<Embedder> embedder_;
  ops::Precision precision_ = ops::Precision::f32;
  int64_t bulk_chunk_tokens_ = 128;
  int threads_ = 1;

  // Replica thread only.
  std::deque<BulkJob> bulk_;
  int64_t bulk_tokens_ = 0;  // tokens not yet run in bulk_
  std::vector<std::span<const int32_t>> views_;
  std::vector<float> scratch_;
  std::vector<float*> targets_;
};

// NOTE: replicas share the cores without oversubscription because each replica thread sets
// its own OpenMP team size: omp_set_num_threads writes the calling thread's nthreads-var ICV
// (libgomp keeps it per thread; checked with a std::thread that sets 2 and gets teams of 2
// while another std::thread still sees the default), and each replica thread that opens a
// parallel region gets a team of its own. So N replicas × max(1, num_threads() / N) threads
// ≈ the cores. omp_set_num_threads is called directly (not prism::set_num_threads) because
// only this thread's share changes, never the process's count.
// Caveat: on a fresh replica thread num_threads() (omp_get_max_threads) is the process default
// (OMP_NUM_THREADS or one per core), not what main() set on its own thread with PRISM_THREADS.
Status EmbedEngine::load() {
  threads_ = std::max(1, num_threads() / std::max(1, replicas_));
  omp_set_num_threads(threads_);

  PRISM_ASSIGN_OR_RETURN(precision_, ops::parse_precision(config_.precision));
  PRISM_ASSIGN_OR_RETURN(bool packed, frontend_->knobs().get_bool("packing", true));
  PRISM_ASSIGN_OR_RETURN(bulk_chunk_tokens_, frontend_->knobs().get_int("bulk_chunk_tokens", 128));
  if (bulk_chunk_tokens_ < 1) return invalid_argument("knob 'bulk_chunk_tokens' must be >= 1");

  EmbedderOptions options;
  options.precision = precision_;
  options.max_batch_tokens = std::max<int64_t>(config_.batching.max_batch_tokens, 1);
  options.packed = packed;
  std::unique_ptr<models::Encoder> encoder;
  if (loader_) {
    PRISM_ASSIGN_OR_RETURN(encoder, loader_(*frontend_, precision_));
  } else {
    PRISM_ASSIGN_OR_RETURN(encoder, models::load_bert(frontend_->model_dir(), precision_));
  }
  PRISM_ASSIGN_OR_RETURN(embedder_, Embedder::create(frontend_, options, std::move(encoder)));

  // Warm-up: the first call builds the GEMM primitives and sizes the arena.
  std::vector<int32_t> warm = {frontend_->pad_id()};
  if (auto ids = frontend_->tokenize("warm up", /*truncate=*/true); ids.has_value()) warm = std::move(ids).value();
  views_.assign(1, warm);
  scratch_.resize(size_t(frontend_->dims()));
  EmbedStats ignored;  // the warm-up is no document: it stays out of the metrics
  embedder_->embed_into(views_, 0, scratch_, &ignored);
  views_.clear();

  if (replica_ == 0)
    PRISM_LOG_INFO("deployment {}: embed engine, {} replica(s) × {} thread(s), precision {}, {}, "
                   "max_batch_tokens {}, bulk_chunk_tokens {}",
                   config_.name, replicas_, threads_, ops::precision_name(precision_), packed ? "packed" : "padded",
                   options.max_batch_tokens, bulk_chunk_tokens_);
  return {};
}

Status EmbedEngine::embed(std::span<const std::span<const int32_t>> sequences, int64_t dims, std::span<float> out) {
  const int64_t out_dims = dims ? dims : frontend_->dims();
  if (out.size() != sequences.size() * size_t(out_dims)) return internal_error("embed: output size mismatch");
  EmbedStats stats;
  try {
    embedder_->embed_into(sequences, dims, out, &stats);
  } catch (const std::exception& e) {
    return internal_error(std::string("embedding failed: ") + e.what());
  }
  metrics_.record(stats);
  return {};
}

Status EmbedEngine::check(const serving::Request& r) const {
  const auto* in = dynamic_cast<const EmbedInput*>(r.input.get());
  if (in == nullptr) return invalid_argument("the embed engine needs an EmbedInput payload");
  if (in->sequences.empty()) return invalid_argument("input is empty");
  for (size_t i = 0; i < in->sequences.size(); ++i) {
    Status s = frontend_->check_sequence(in->sequences[i]);
    if (!s.ok()) return Status(s.code(), "input[" + std::to_string(i) + "] " + s.message());
  }
  return frontend_->check_dimensions(in->dims);
}

void EmbedEngine::admit(std::vector<RequestPtr> requests) {
  std::vector<RequestPtr> online;
  for (RequestPtr& r : requests) {
    if (r->cancelled()) {
      r->complete_cancelled();
      continue;
    }
    if (Status s = check(*r); !s.ok()) {
      r->complete(std::move(s));
      continue;
    }
    if (r->lane == serving::Lane::online) {
      online.push_back(std::move(r));
      continue;
    }
    BulkJob job;
    job.input = static_cast<const EmbedInput*>(r->input.get());
    const auto& seqs = job.input->sequences;
    job.order.resize(seqs.size());
    std::iota(job.order.begin(), job.order.end(), size_t{0});
    std::stable_sort(job.order.begin(), job.order.end(),
                     [&](size_t a, size_t b) { return seqs[a].size() < seqs[b].size(); });
    for (const auto& s : seqs) job.remaining_tokens += int64_t(s.size());
    job.output = std::make_unique<EmbedOutput>();
    job.output->dims = job.input->dims ? job.input->dims : frontend_->dims();
    job.output->vectors.resize(seqs.size() * size_t(job.output->dims));
    job.request = std::move(r);
    bulk_tokens_ += job.remaining_tokens;
    bulk_.push_back(std::move(job));
  }
  if (!online.empty()) run_online(online);
}

// NOTE: one embed call per distinct `dims` (usually one: clients rarely mix sizes in a batch),
// so every online request of the batch shares the same micro-batches.
void EmbedEngine::run_online(std::span<const RequestPtr> requests) {
  std::vector<bool> taken(requests.size(), false);
  for (size_t first = 0; first < requests.size(); ++first) {
    if (taken[first]) continue;
    const int64_t dims = static_cast<const EmbedInput&>(*requests[first]->input).dims;
    const int64_t out_dims = dims ? dims : frontend_->dims();
    std::vector<size_t> group;
    views_.clear();
    for (size_t i = first; i < requests.size(); ++i) {
      const auto& in = static_cast<const EmbedInput&>(*requests[i]->input);
      if (taken[i] || in.dims != dims) continue;
      taken[i] = true;
      group.push_back(i);
      views_.insert(views_.end(), in.sequences.begin(), in.sequences.end());
    }
    scratch_.resize(views_.size() * size_t(out_dims));
    const Status status = embed(views_, dims, scratch_);
    size_t row = 0;
    for (size_t i : group) {
      const RequestPtr& r = requests[i];
      const size_t n = static_cast<const EmbedInput&>(*r->input).sequences.size();
      if (!status.ok()) {
        r->complete(status);
        continue;
      }
      auto out = std::make_unique<EmbedOutput>();
      out->dims = out_dims;
      out->vectors.assign(scratch_.begin() + ptrdiff_t(row * size_t(out_dims)),
                          scratch_.begin() + ptrdiff_t((row + n) * size_t(out_dims)));
      r->complete(serving::PayloadPtr(std::move(out)));
      row += n;
    }
  }
}

void EmbedEngine::prune_bulk() {
  const auto now = serving::Clock::now();
  for (auto it = bulk_.begin(); it != bulk_.end();) {
    const serving::Request& r = *it->request;
    if (!r.cancelled() && now <= r.deadline) {
      ++it;
      continue;
    }
    if (r.cancelled()) it->request->complete_cancelled();
    else it->request->complete_deadline_exceeded();
    bulk_tokens_ -= it->remaining_tokens;
    it = bulk_.erase(it);
  }
}

// NOTE: a chunk takes sequences in job order (FIFO across bulk requests), shortest first
// within a job, until it holds bulk_chunk_tokens (at least one sequence); it spans jobs only
// while their dims agree, so it is one embed call. The jobs it touches are a prefix of bulk_.
void EmbedEngine::run_bulk_chunk() {
  prune_bulk();
  if (bulk_.empty()) return;
  views_.clear();
  targets_.clear();
  const int64_t dims = bulk_.front().input->dims;
  const int64_t out_dims = bulk_.front().output->dims;
  int64_t tokens = 0;
  size_t touched = 0;
  for (BulkJob& job : bulk_) {
    if (tokens >= bulk_chunk_tokens_ || job.input->dims != dims) break;
    ++touched;
    while (!job.done() && tokens < bulk_chunk_tokens_) {
      const size_t seq = job.order[job.next++];
      const std::vector<int32_t>& ids = job.input->sequences[seq];
      views_.emplace_back(ids);
      targets_.push_back(job.output->vectors.data() + seq * size_t(out_dims));
      tokens += int64_t(ids.size());
      job.remaining_tokens -= int64_t(ids.size());
    }
  }
  bulk_tokens_ -= tokens;
  scratch_.resize(views_.size() * size_t(out_dims));
  const Status status = embed(views_, dims, scratch_);
  if (!status.ok()) {
    for (size_t i = 0; i < touched; ++i) {
      bulk_tokens_ -= bulk_.front().remaining_tokens;
      bulk_.front().request->complete(status);
      bulk_.pop_front();
    }
    return;
  }
  for (size_t i = 0; i < targets_.size(); ++i)
    std::copy_n(scratch_.data() + i * size_t(out_dims), out_dims, targets_[i]);
  while (!bulk_.empty() && bulk_.front().done()) {
    bulk_.front().request->complete(serving::PayloadPtr(std::move(bulk_.front().output)));
    bulk_.pop_front();
  }
}

// NOTE: BatchSource::poll serves the online lane first. While the bulk backlog is under two
// batches' worth, take whatever waits; past it, take one request at a time and stop at the
// first bulk one, so online requests are never left waiting while the backlog stays bounded
// by about one request per chunk (the queue keeps its own bound on the rest).
std::vector<RequestPtr> EmbedEngine::poll_waiting(serving::BatchSource& source) {
  const int cap = serving::batch_cap(config_.batching);
  const int64_t budget = config_.batching.max_batch_tokens;
  if (bulk_tokens_ < 2 * budget) return source.poll(cap, budget);
  std::vector<RequestPtr> taken;
  while (int(taken.size()) < cap) {
    std::vector<RequestPtr> one = source.poll(1, 1);
    if (one.empty()) break;
    const bool bulk = one.front()->lane == serving::Lane::bulk;
    taken.push_back(std::move(one.front()));
    if (bulk) break;
  }
  return taken;
}

void EmbedEngine::serve(serving::BatchSource& source) {
  while (true) {
    if (bulk_.empty()) {
      std::vector<RequestPtr> batch = source.next_batch();
      if (batch.empty()) return;
      admit(std::move(batch));
      continue;
    }
    if (source.aborting()) {
      for (BulkJob& job : bulk_) job.request->complete(unavailable("the server is shutting down"));
      bulk_.clear();
      bulk_tokens_ = 0;
      continue;
    }
    run_bulk_chunk();
    admit(poll_waiting(source));
  }
}

void EmbedEngine::run_batch(std::span<const RequestPtr> batch) {
  std::vector<RequestPtr> checked;
  for (const RequestPtr& r : batch) {
    if (r->cancelled()) r->complete_cancelled();
    else if (Status s = check(*r); !s.ok()) r->complete(std::move(s));
    else checked.push_back(r);
  }
  run_online(checked);
}

nlohmann::json EmbedEngine::describe() const {
  return {{"engine", "embed"},
          {"family", frontend_->family()},
          {"dims", frontend_->dims()},
          {"max_tokens", frontend_->max_tokens()},
          {"pooling", std::string(models::pooling_name(frontend_->pooling()))},
          {"normalize", frontend_->normalize()},
          {"precision", std::string(ops::precision_name(precision_))},
          {"embedding_space_id", frontend_->space_id()},
          {"matryoshka_dims", frontend_->matryoshka_dims()},
          {"packing", embedder_ ? embedder_->options().packed : true},
          {"max_batch_tokens", embedder_ ? embedder_->options().max_batch_tokens : 0},
          {"bulk_chunk_tokens", bulk_chunk_tokens_},
          {"threads_per_replica", threads_}};
}

}  // namespace

serving::EngineFactory embed_engine_factory(EncoderLoader loader) {
  return [loader](const serving::EngineContext& context) -> Result<std::unique_ptr<serving::Engine>> {
    auto frontend = std::dynamic_pointer_cast<const EmbedFrontend>(context.frontend);
    if (frontend == nullptr) return internal_error("an embed deployment needs its EmbedFrontend");
    return std::unique_ptr<serving::Engine>(std::make_unique<EmbedEngine>(context, std::move(frontend), loader));
  };
}

serving::FrontendFactory embed_frontend_factory() {
  return [](const serving::DeploymentConfig& config) -> Result<serving::FrontendPtr> {
    PRISM_ASSIGN_OR_RETURN(std::shared_ptr<const EmbedFrontend> fe, EmbedFrontend::load(config.model, config.knobs));
    return serving::FrontendPtr(std::move(fe));
  };
}

void register_embed_engine(serving::EngineFactories& factories) {
  factories.add("embed", serving::EngineKind(embed_engine_factory(), embed_frontend_factory()));
}

}  // namespace prism::engines::encode

// engines/encode/embed_engine.cpp: the embed engine's loop (online first, bulk in chunks),
// its per-request checks and its metrics. Texts and images go through one path: each input
// is an item (a token sequence or a preprocessed image) with a row in its request's output.
// Each model call (a batch's or chunk's texts and images, the warm-up) runs inside a
// ComputeTurn (engines/compute_turn.h): deployments take turns on the one compute pool.
#include "engines/encode/embed_engine.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <numeric>

#include "base/log.h"
#include "engines/compute_turn.h"
#include "engines/encode/embedder.h"
#include "engines/encode/media_cache.h"
#include "frontends/embed_frontend.h"
#include "frontends/embed_payload.h"
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
                                    serving::batch_size_buckets(), l)),
        images(m.counter("prism_embed_images_total", "Image inputs embedded (dual encoders).", l)),
        images_encoded(m.counter("prism_embed_images_encoded_total",
                                 "Image inputs the image tower ran for (the rest came from the media cache).", l)),
        // NOTE: the same series names, types and help as the generate engine's (metrics.h: the
        // first registration of a name fixes its help), so either may register first.
        cache_lookups(m.counter("prism_media_cache_lookups_total", "Media items looked up in the media cache.", l)),
        cache_hits(m.counter("prism_media_cache_hits_total",
                             "Media items whose encoder output came from the media cache (hit ratio: hits / lookups).",
                             l)),
        cache_bytes(m.gauge("prism_media_cache_bytes", "Bytes of encoder outputs in the process's media cache.", l)) {}

  void record(const EmbedStats& s) {
    if (s.useful_flops > 0) useful_flops.inc(s.useful_flops);
    if (s.images > 0) {
      images.inc(double(s.images));
      images_encoded.inc(double(s.images_encoded));
      cache_lookups.inc(double(s.cache_lookups));
      cache_hits.inc(double(s.cache_hits));
      cache_bytes.set(double(MediaCache::shared().stats().bytes));
    }
    if (s.sequences == 0) return;
    documents.inc(double(s.sequences));
    tokens.inc(double(s.real_tokens));
    padding.observe(s.padded_tokens > 0 ? double(s.padded_tokens - s.real_tokens) / double(s.padded_tokens) : 0.0);
    batch_sequences.observe(double(s.sequences));
  }

  serving::Counter& documents;
  serving::Counter& tokens;
  serving::Counter& useful_flops;
  serving::Histogram& padding;
  serving::Histogram& batch_sequences;
  serving::Counter& images;
  serving::Counter& images_encoded;
  serving::Counter& cache_lookups;
  serving::Counter& cache_hits;
  serving::Gauge& cache_bytes;
};

// The items of one model call (an online group or a bulk chunk), texts and images, each with
// the output row it fills. Replica thread only; reused from call to call.
struct EmbedWork {
  std::vector<std::span<const int32_t>> texts;
  std::vector<float*> text_targets;  // [out_dims] rows in the requests' outputs
  std::vector<ImageRef> images;
  std::vector<float*> image_targets;

  void clear() {
    texts.clear();
    text_targets.clear();
    images.clear();
    image_targets.clear();
  }
  size_t size() const { return texts.size() + images.size(); }
};

// A request's output, sized for every input, and the row each input fills.
std::unique_ptr<frontends::EmbedOutput> make_output(const frontends::EmbedInput& in, int64_t out_dims) {
  auto out = std::make_unique<frontends::EmbedOutput>();
  out->dims = out_dims;
  out->vectors.resize(in.num_inputs() * size_t(out_dims));
  return out;
}

// A bulk request being worked through chunk by chunk.
struct BulkJob {
  RequestPtr request;
  const frontends::EmbedInput* input = nullptr;  // owned by request
  // Items: i < sequences → sequence i; else image i - sequences. Sequences shortest first (less
  // padding per chunk), then the images.
  std::vector<size_t> order;
  std::vector<size_t> positions;  // input position of each sequence
  size_t next = 0;                // into order
  int64_t remaining_tokens = 0;
  std::unique_ptr<frontends::EmbedOutput> output;
  bool done() const { return next == order.size(); }
};

class EmbedEngine final : public serving::Engine {
 public:
  EmbedEngine(const serving::EngineContext& context, std::shared_ptr<const frontends::EmbedFrontend> frontend,
              EmbedModelsLoader loader)
      : config_(context.config),
        frontend_(std::move(frontend)),
        loader_(std::move(loader)),
        replica_(context.replica),
        replicas_(context.replicas),
        metrics_(context.metrics, context.labels),
        compute_(context.metrics, context.labels) {}

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
  // Runs the models over work_ and writes every item's row; an exception (a library's)
  // becomes an internal error for the requests involved.
  Status run_work(int64_t dims);
  // An item's share of a token budget: its tokens, or the positions the image tower runs.
  int64_t item_tokens(const BulkJob& job, size_t item) const;

  const serving::DeploymentConfig& config_;  // not owned; outlives the engine
  std::shared_ptr<const frontends::EmbedFrontend> frontend_;
  EmbedModelsLoader loader_;
  const int replica_;
  const int replicas_;
  EmbedMetrics metrics_;
  ComputeMetrics compute_;
  std::unique_ptr<Embedder> embedder_;
  ops::Precision precision_ = ops::Precision::f32;
  int64_t bulk_chunk_tokens_ = 128;
  int threads_ = 1;

  // Replica thread only.
  std::deque<BulkJob> bulk_;
  int64_t bulk_tokens_ = 0;  // tokens not yet run in bulk_ (images at image_tokens())
  EmbedWork work_;
  std::vector<float> scratch_;
};

// NOTE: replicas split the pool (set_replica_team: num_threads() / replicas each, on the
// replica's own thread; engines/compute_turn.cpp) and their turns fit in the gate side by side.
Status EmbedEngine::load() {
  threads_ = set_replica_team(replicas_);

  PRISM_ASSIGN_OR_RETURN(precision_, ops::parse_precision(config_.precision));
  PRISM_ASSIGN_OR_RETURN(bool packed, frontend_->knobs().get_bool("packing", true));
  PRISM_ASSIGN_OR_RETURN(bulk_chunk_tokens_, frontend_->knobs().get_int("bulk_chunk_tokens", 128));
  if (bulk_chunk_tokens_ < 1) return invalid_argument("knob 'bulk_chunk_tokens' must be >= 1");
  PRISM_ASSIGN_OR_RETURN(int64_t max_views, frontend_->knobs().get_int("max_encoder_views", 8));
  if (max_views < 1) return invalid_argument("knob 'max_encoder_views' must be >= 1");

  EmbedderOptions options;
  options.precision = precision_;
  options.max_batch_tokens = std::max<int64_t>(config_.batching.max_batch_tokens, 1);
  options.packed = packed;
  options.max_batch_images = int(std::min<int64_t>(max_views, 1 << 20));
  if (loader_) {
    PRISM_ASSIGN_OR_RETURN(EmbedModels loaded, loader_(*frontend_, precision_));
    PRISM_ASSIGN_OR_RETURN(embedder_,
                           Embedder::create(frontend_, options, std::move(loaded.text), std::move(loaded.image)));
  } else {
    PRISM_ASSIGN_OR_RETURN(embedder_, Embedder::load(frontend_, options));  // load_bert or load_dual_encoder
  }

  // Warm-up: the first call builds the GEMM primitives and sizes the arena. It is no
  // document: it stays out of the metrics and the media cache.
  {
    ComputeTurn turn(compute_, threads_);
    embedder_->warm_up();
  }

  if (replica_ == 0)
    PRISM_LOG_INFO("deployment {}: embed engine, {} replica(s) × {} thread(s), precision {}, {}, "
                   "max_batch_tokens {}, bulk_chunk_tokens {}{}",
                   config_.name, replicas_, threads_, ops::precision_name(precision_), packed ? "packed" : "padded",
                   options.max_batch_tokens, bulk_chunk_tokens_,
                   frontend_->accepts_images() ? ", images " + std::to_string(options.max_batch_images) + " per call"
                                               : std::string());
  return {};
}

Status EmbedEngine::run_work(int64_t dims) {
  const int64_t out_dims = dims ? dims : frontend_->dims();
  const auto scatter = [&](const std::vector<float*>& targets) {
    for (size_t i = 0; i < targets.size(); ++i)
      std::copy_n(scratch_.data() + i * size_t(out_dims), out_dims, targets[i]);
  };
  // NOTE: the turn covers the model calls; with images it also covers their media cache
  // lookups (memory, or a file of [server.media_cache] dir), which Embedder interleaves.
  ComputeTurn turn(compute_, threads_);
  try {
    if (!work_.texts.empty()) {
      EmbedStats stats;
      scratch_.resize(work_.texts.size() * size_t(out_dims));
      embedder_->embed_into(work_.texts, dims, scratch_, &stats);
      metrics_.record(stats);
      scatter(work_.text_targets);
    }
    if (!work_.images.empty()) {
      EmbedStats stats;
      scratch_.resize(work_.images.size() * size_t(out_dims));
      embedder_->embed_images_into(work_.images, dims, scratch_, &stats);
      metrics_.record(stats);
      scatter(work_.image_targets);
    }
  } catch (const std::exception& e) {
    return internal_error(std::string("embedding failed: ") + e.what());
  }
  return {};
}

Status EmbedEngine::check(const serving::Request& r) const {
  const auto* in = dynamic_cast<const frontends::EmbedInput*>(r.input.get());
  if (in == nullptr) return invalid_argument("the embed engine needs an frontends::EmbedInput payload");
  if (in->num_inputs() == 0) return invalid_argument("input is empty");
  for (size_t k = 0; k < in->images.size(); ++k) {
    const frontends::EmbedImage& image = in->images[k];
    if (image.index >= in->num_inputs() || (k > 0 && image.index <= in->images[k - 1].index))
      return invalid_argument("image inputs must have distinct, ascending positions among the inputs");
    Status s = frontend_->check_image(image);
    if (!s.ok()) return Status(s.code(), "input[" + std::to_string(image.index) + "] " + s.message());
  }
  const std::vector<size_t> positions = in->sequence_positions();
  for (size_t i = 0; i < in->sequences.size(); ++i) {
    Status s = frontend_->check_sequence(in->sequences[i]);
    if (!s.ok()) return Status(s.code(), "input[" + std::to_string(positions[i]) + "] " + s.message());
  }
  return frontend_->check_dimensions(in->dims);
}

int64_t EmbedEngine::item_tokens(const BulkJob& job, size_t item) const {
  const auto& seqs = job.input->sequences;
  return item < seqs.size() ? int64_t(seqs[item].size()) : frontend_->image_tokens();
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
    job.input = static_cast<const frontends::EmbedInput*>(r->input.get());
    const auto& seqs = job.input->sequences;
    job.order.resize(job.input->num_inputs());
    std::iota(job.order.begin(), job.order.end(), size_t{0});
    std::stable_sort(job.order.begin(), job.order.begin() + ptrdiff_t(seqs.size()),
                     [&](size_t a, size_t b) { return seqs[a].size() < seqs[b].size(); });
    job.positions = job.input->sequence_positions();
    for (size_t item : job.order) job.remaining_tokens += item_tokens(job, item);
    job.output = make_output(*job.input, job.input->dims ? job.input->dims : frontend_->dims());
    job.request = std::move(r);
    bulk_tokens_ += job.remaining_tokens;
    bulk_.push_back(std::move(job));
  }
  if (!online.empty()) run_online(online);
}

// NOTE: one model call per distinct `dims` (usually one: clients rarely mix sizes in a batch),
// so every online request of the batch shares the same micro-batches, texts and images alike.
void EmbedEngine::run_online(std::span<const RequestPtr> requests) {
  std::vector<bool> taken(requests.size(), false);
  for (size_t first = 0; first < requests.size(); ++first) {
    if (taken[first]) continue;
    const int64_t dims = static_cast<const frontends::EmbedInput&>(*requests[first]->input).dims;
    const int64_t out_dims = dims ? dims : frontend_->dims();
    std::vector<size_t> group;
    std::vector<std::unique_ptr<frontends::EmbedOutput>> outputs;
    work_.clear();
    for (size_t i = first; i < requests.size(); ++i) {
      const auto& in = static_cast<const frontends::EmbedInput&>(*requests[i]->input);
      if (taken[i] || in.dims != dims) continue;
      taken[i] = true;
      group.push_back(i);
      outputs.push_back(make_output(in, out_dims));
      float* rows = outputs.back()->vectors.data();
      const std::vector<size_t> positions = in.sequence_positions();
      for (size_t k = 0; k < in.sequences.size(); ++k) {
        work_.texts.emplace_back(in.sequences[k]);
        work_.text_targets.push_back(rows + positions[k] * size_t(out_dims));
      }
      for (const frontends::EmbedImage& image : in.images) {
        work_.images.push_back({image.views.get(), image.key});
        work_.image_targets.push_back(rows + image.index * size_t(out_dims));
      }
    }
    const Status status = run_work(dims);
    for (size_t g = 0; g < group.size(); ++g) {
      const RequestPtr& r = requests[group[g]];
      if (!status.ok()) r->complete(status);
      else r->complete(serving::PayloadPtr(std::move(outputs[g])));
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

// NOTE: a chunk takes items in job order (FIFO across bulk requests), within a job texts
// shortest first and then images, until it holds bulk_chunk_tokens (at least one item; an
// image counts image_tokens()); it spans jobs only while their dims agree, so it is one call
// per tower. The jobs it touches are a prefix of bulk_.
void EmbedEngine::run_bulk_chunk() {
  prune_bulk();
  if (bulk_.empty()) return;
  work_.clear();
  const int64_t dims = bulk_.front().input->dims;
  const int64_t out_dims = bulk_.front().output->dims;
  int64_t tokens = 0;
  size_t touched = 0;
  for (BulkJob& job : bulk_) {
    if (tokens >= bulk_chunk_tokens_ || job.input->dims != dims) break;
    ++touched;
    const auto& seqs = job.input->sequences;
    float* rows = job.output->vectors.data();
    while (!job.done() && tokens < bulk_chunk_tokens_) {
      const size_t item = job.order[job.next++];
      const int64_t cost = item_tokens(job, item);
      if (item < seqs.size()) {
        work_.texts.emplace_back(seqs[item]);
        work_.text_targets.push_back(rows + job.positions[item] * size_t(out_dims));
      } else {
        const frontends::EmbedImage& image = job.input->images[item - seqs.size()];
        work_.images.push_back({image.views.get(), image.key});
        work_.image_targets.push_back(rows + image.index * size_t(out_dims));
      }
      tokens += cost;
      job.remaining_tokens -= cost;
    }
  }
  bulk_tokens_ -= tokens;
  const Status status = run_work(dims);
  if (!status.ok()) {
    for (size_t i = 0; i < touched; ++i) {
      bulk_tokens_ -= bulk_.front().remaining_tokens;
      bulk_.front().request->complete(status);
      bulk_.pop_front();
    }
    return;
  }
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
          {"pooling", std::string(configs::pooling_name(frontend_->pooling()))},
          {"normalize", frontend_->normalize()},
          {"precision", std::string(ops::precision_name(precision_))},
          {"embedding_space_id", frontend_->space_id()},
          {"matryoshka_dims", frontend_->matryoshka_dims()},
          {"packing", embedder_ ? embedder_->options().packed : true},
          {"max_batch_tokens", embedder_ ? embedder_->options().max_batch_tokens : 0},
          {"bulk_chunk_tokens", bulk_chunk_tokens_},
          {"threads_per_replica", threads_},
          {"accepts_images", frontend_->accepts_images()},
          {"image_size", frontend_->image_size()},
          {"max_encoder_views", embedder_ ? embedder_->options().max_batch_images : 0}};
}

}  // namespace

serving::EngineFactory embed_engine_factory(EncoderLoader loader) {
  if (!loader) return embed_engine_factory(EmbedModelsLoader());
  return embed_engine_factory(
      EmbedModelsLoader([loader](const frontends::EmbedFrontend& frontend, ops::Precision precision) -> Result<EmbedModels> {
        EmbedModels loaded;
        PRISM_ASSIGN_OR_RETURN(loaded.text, loader(frontend, precision));
        return loaded;
      }));
}

serving::EngineFactory embed_engine_factory(EmbedModelsLoader loader) {
  return [loader](const serving::EngineContext& context) -> Result<std::unique_ptr<serving::Engine>> {
    auto frontend = std::dynamic_pointer_cast<const frontends::EmbedFrontend>(context.frontend);
    if (frontend == nullptr) return internal_error("an embed deployment needs its frontends::EmbedFrontend");
    return std::unique_ptr<serving::Engine>(std::make_unique<EmbedEngine>(context, std::move(frontend), loader));
  };
}

serving::FrontendFactory embed_frontend_factory() {
  return [](const serving::DeploymentConfig& config) -> Result<serving::FrontendPtr> {
    PRISM_ASSIGN_OR_RETURN(std::shared_ptr<const frontends::EmbedFrontend> fe, frontends::EmbedFrontend::load(config.model, config.knobs));
    return serving::FrontendPtr(std::move(fe));
  };
}

void register_embed_engine(serving::EngineFactories& factories) {
  factories.add("embed", serving::EngineKind(embed_engine_factory(), embed_frontend_factory()));
}

}  // namespace prism::engines::encode

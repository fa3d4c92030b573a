// engines/generate/media_input.cpp: the media rows of a vision-language model's prompts.
#include "engines/generate/media_input.h"

#include <algorithm>

#include "base/log.h"
#include "engines/encode/media_cache.h"

namespace prism::engines::generate {
namespace {

// Visual tokens per request: a pooled image (16-64) up to long videos.
constexpr double kVisualTokenBuckets[] = {16, 64, 144, 256, 576, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};

}  // namespace

VlmMetrics::VlmMetrics(serving::MetricsRegistry& m, const serving::Labels& l)
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

MediaInput::MediaInput(const StageContext& context, int32_t image_token_id, int max_encoder_views)
    : deployment_(context.config.name),
      compute_(context.compute),
      threads_(context.threads),
      hidden_(context.decoder.hidden_size()),
      image_token_id_(image_token_id),
      max_encoder_views_(max_encoder_views),
      metrics_(context.metrics, context.labels) {}

Result<std::unique_ptr<MediaInput>> MediaInput::load(const StageContext& context, const MediaEncoderLoader& loader,
                                                     int32_t image_token_id, int max_encoder_views) {
  if (!loader) return internal_error("a vision-language deployment needs a media encoder loader");
  std::unique_ptr<MediaInput> stage(new MediaInput(context, image_token_id, max_encoder_views));
  PRISM_ASSIGN_OR_RETURN(stage->encoder_, loader(context.config, context.precision));
  if (stage->encoder_ == nullptr) return internal_error("the media encoder loader returned nothing");
  const models::MediaEncoder& e = *stage->encoder_;
  if (e.image_size() < 1 || e.grid_side() < 1)
    return internal_error("the media encoder takes views of side " + std::to_string(e.image_size()) +
                          " into grids of side " + std::to_string(e.grid_side()));
  if (e.output_size() != context.decoder.hidden_size())
    return invalid_argument("the media encoder gives rows of " + std::to_string(e.output_size()) +
                            " values, but the language model's hidden size is " +
                            std::to_string(context.decoder.hidden_size()));
  const int64_t vocab = context.decoder.vocab_size();
  if (image_token_id < 0 || image_token_id >= vocab)
    return invalid_argument("the image token id " + std::to_string(image_token_id) +
                            " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  stage->encoder_id_ = context.config.model + "|" + std::string(ops::precision_name(context.precision)) + "|vlm";
  stage->runner_ = std::make_unique<encode::MediaEncodeRunner>(e, max_encoder_views);
  // Warm-up: one blank view builds the encoder's primitives and checks its output shape.
  media::PixelViews blank;
  blank.side = int(e.image_size());
  blank.num_views = 1;
  blank.values.assign(size_t(3 * e.image_size() * e.image_size()), 0.0f);
  const media::PixelViews* views[] = {&blank};
  ComputeTurn turn(context.compute, context.threads);
  PRISM_RETURN_IF_ERROR(stage->runner_->encode(views).status());
  return stage;
}

// The counts of a multimodal prompt (admit checks its image-token positions).
Status MediaInput::check(const frontends::GenerateInput& in) const {
  for (size_t k = 0; k < in.media.size(); ++k)
    PRISM_RETURN_IF_ERROR(check_media_item(in.media[k], encoder_->image_size(), encoder_->grid_side(), k));
  return {};
}

// NOTE: also for prompts without media: image-token ids with no rows behind them are refused.
Status MediaInput::admit(RequestState& rs) {
  const frontends::GenerateInput& in = *rs.input;
  PRISM_ASSIGN_OR_RETURN(PromptMedia media, place_media(in.prompt, image_token_id_, in.media));
  if (in.media.empty()) return {};
  rs.media = std::move(media);
  rs.media_held.assign(in.media.size(), 0);
  metrics_.visual_tokens.observe(double(rs.media.num_rows()));
  for (const frontends::MediaItem& item : in.media)
    if (item.kind == frontends::MediaItem::Kind::video) metrics_.frames.inc(double(item.views->num_views));
  return {};
}

// NOTE: an item is needed when one of its rows lies at or after a planned sequence's
// num_computed (a prefix hit over an image's blocks makes it unneeded: a second turn about the
// same image neither looks it up nor encodes it).
std::vector<MediaInput::MediaNeed> MediaInput::media_needs(std::span<const StepItem> items) const {
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

Status MediaInput::place_media_rows(const MediaNeed& n, const encode::MediaFeatures& features) {
  RequestState& rs = *n.rs;
  if (rs.media_rows.empty()) rs.media_rows.assign(size_t(rs.media.num_rows() * hidden_), 0.0f);
  const frontends::MediaItem& item = rs.input->media[n.item];
  const std::span<float> out(rs.media_rows.data() + rs.media.item_first_row[n.item] * hidden_,
                             size_t(item.num_rows * hidden_));
  if (Status st = pool_media_rows(features, item, encoder_->grid_side(), out); !st.ok())
    return invalid_argument("media item " + std::to_string(n.item) + ": " + st.message());
  rs.media_held[n.item] = 1;
  return {};
}

// NOTE: every miss of the step goes into one encoder run (batched across requests); items
// with the same key are encoded once, counted as encoded by the request that asked first.
void MediaInput::acquire(std::span<const StepItem> items, StageFailures& failed) {
  const std::vector<MediaNeed> needs = media_needs(items);
  if (needs.empty()) return;
  encode::MediaCache& cache = encode::MediaCache::shared();
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
    const frontends::MediaItem& item = n.rs->input->media[n.item];
    metrics_.cache_lookups.inc();
    if (encode::MediaFeaturesPtr f = cache.find(encoder_id_, item.key)) {
      metrics_.cache_hits.inc();
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
      return runner_->encode(missing, &stats);
    }();
    if (!encoded.has_value()) {
      PRISM_LOG_ERROR("deployment {}: {}", deployment_, encoded.status().message());
      for (const auto& group : waiting_for)
        for (const MediaNeed& n : group) fail(n.rs, encoded.status());
    } else {
      const double per_item = stats.seconds / double(missing.size());
      for (size_t m = 0; m < missing.size(); ++m) {
        metrics_.encoder_seconds.observe(per_item);
        cache.insert(encoder_id_, missing_keys[m], encoded.value()[m]);
        ++waiting_for[m].front().rs->encoded_media;
        for (const MediaNeed& n : waiting_for[m])
          if (Status st = place_media_rows(n, *encoded.value()[m]); !st.ok()) fail(n.rs, std::move(st));
      }
    }
  }
  metrics_.cache_bytes.set(double(cache.stats().bytes));
}

// NOTE: only prompt positions take media rows (row_of covers the prompt); a generated image
// token id stays a token.
void MediaInput::place(const RequestState& rs, int64_t first_position, int32_t first_row, std::span<int32_t> tokens) {
  for (size_t j = 0; j < tokens.size(); ++j) {
    const int64_t pos = first_position + int64_t(j);
    if (pos >= rs.media.end || rs.media.row_of[size_t(pos)] < 0) continue;
    PRISM_CHECK(!rs.media_rows.empty());
    batch_media_.emplace_back(first_row + int32_t(j), rs.media_rows.data() + rs.media.row_of[size_t(pos)] * hidden_);
    tokens[j] = -1;
  }
}

void MediaInput::fill(std::span<const StepItem> items, int64_t num_tokens, models::DecoderBatch& batch) {
  if (!batch_media_.empty()) {
    batch.input_embeddings = Tensor::zeros({num_tokens, hidden_}, DType::f32);
    float* dst = batch.input_embeddings.data<float>();
    for (const auto& [row, src] : batch_media_) std::copy(src, src + hidden_, dst + row * hidden_);
  }
  batch_media_.clear();
}

void MediaInput::after_step(std::span<const std::unique_ptr<RequestState>> requests,
                            std::span<Sequence* const> running) {
  for (const auto& rs : requests) {
    if (rs->media_rows.empty()) continue;
    const bool needed = std::any_of(rs->choices.begin(), rs->choices.end(), [&](const auto& s) {
      return !s->finished && s->num_computed < rs->media.end &&
             std::find(running.begin(), running.end(), s.get()) != running.end();
    });
    if (needed) continue;
    rs->media_rows = {};
    std::fill(rs->media_held.begin(), rs->media_held.end(), 0);
  }
}

void MediaInput::describe(nlohmann::json& engine) const {
  engine["vision"] = {{"image_size", encoder_->image_size()},
                      {"rows_per_view", encoder_->grid_side() * encoder_->grid_side()},
                      {"image_token_id", image_token_id_},
                      {"max_encoder_views", max_encoder_views_}};
}

void MediaInput::log_loaded(const std::string& deployment) const {
  PRISM_LOG_INFO("deployment {}: media encoder: views of {}², {} rows each, {} views per call, image token {}",
                 deployment, encoder_->image_size(), encoder_->grid_side() * encoder_->grid_side(),
                 max_encoder_views_, image_token_id_);
}

}  // namespace prism::engines::generate

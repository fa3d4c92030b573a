// engines/encode/embedder.cpp: sort, cut into micro-batches, encode, pool, truncate,
// normalise, scatter back; images through the media cache and the image tower. No queues, no
// threads of its own (the models use the OpenMP pool).
#include "engines/encode/embedder.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>

#include "models/bert/bert.h"
#include "models/encoder.h"
#include "models/pooling.h"

namespace prism::engines::encode {

void EmbedStats::add(const EmbedStats& o) {
  sequences += o.sequences;
  real_tokens += o.real_tokens;
  padded_tokens += o.padded_tokens;
  micro_batches += o.micro_batches;
  useful_flops += o.useful_flops;
  images += o.images;
  images_encoded += o.images_encoded;
  cache_lookups += o.cache_lookups;
  cache_hits += o.cache_hits;
  image_batches += o.image_batches;
}

Result<std::unique_ptr<Embedder>> Embedder::load(std::shared_ptr<const frontends::EmbedFrontend> frontend,
                                                 const EmbedderOptions& options) {
  PRISM_CHECK(frontend != nullptr);
  if (frontend->accepts_images()) {
    PRISM_ASSIGN_OR_RETURN(models::DualEncoderModel model,
                           models::load_dual_encoder(frontend->model_dir(), options.precision));
    return create(std::move(frontend), options, std::move(model.text), std::move(model.image));
  }
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<models::Encoder> encoder,
                         models::load_bert(frontend->model_dir(), options.precision));
  return create(std::move(frontend), options, std::move(encoder));
}

Result<std::unique_ptr<Embedder>> Embedder::create(std::shared_ptr<const frontends::EmbedFrontend> frontend,
                                                   const EmbedderOptions& options,
                                                   std::unique_ptr<models::Encoder> encoder,
                                                   std::unique_ptr<models::ImageEmbedder> image) {
  PRISM_CHECK(frontend != nullptr && encoder != nullptr);
  if (encoder->hidden_size() != frontend->dims())
    return invalid_argument("the encoder's hidden size " + std::to_string(encoder->hidden_size()) +
                            " is not the frontend's " + std::to_string(frontend->dims()) + " dims");
  if (encoder->max_tokens() < frontend->max_tokens())
    return invalid_argument("the encoder takes " + std::to_string(encoder->max_tokens()) +
                            " tokens, fewer than the frontend's maximum of " + std::to_string(frontend->max_tokens()));
  if (options.max_batch_tokens < 1 || options.max_batch_sequences < 1 || options.max_batch_images < 1)
    return invalid_argument("max_batch_tokens, max_batch_sequences and max_batch_images must be >= 1");
  if (frontend->accepts_images()) {
    if (image == nullptr) return invalid_argument("the " + frontend->family() + " model needs its image tower");
    if (image->embedding_size() != frontend->dims() || image->image_size() != frontend->image_size())
      return invalid_argument("the image tower gives " + std::to_string(image->embedding_size()) + " dims from " +
                              std::to_string(image->image_size()) + " px images; the frontend expects " +
                              std::to_string(frontend->dims()) + " dims from " +
                              std::to_string(frontend->image_size()) + " px");
  } else if (image != nullptr) {
    return invalid_argument("an image tower was given for a " + frontend->family() + " model, which takes no images");
  }
  std::unique_ptr<Embedder> e(new Embedder());
  e->image_encoder_id_ = frontend->model_dir() + "|" + std::string(ops::precision_name(options.precision)) +
                         "|image-embed";
  e->frontend_ = std::move(frontend);
  e->options_ = options;
  e->encoder_ = std::move(encoder);
  e->image_ = std::move(image);
  return e;
}

Embedder::~Embedder() = default;

std::vector<float> Embedder::embed(std::span<const std::vector<int32_t>> sequences, int64_t dims,
                                   EmbedStats* stats) {
  const int64_t out_dims = dims ? dims : frontend_->dims();
  views_.assign(sequences.begin(), sequences.end());
  std::vector<float> out(sequences.size() * size_t(out_dims));
  embed_into(views_, dims, out, stats);
  return out;
}

// NOTE: micro-batches are consecutive runs of the inputs sorted by length (shortest first),
// each under max_batch_sequences and max_batch_tokens, costed as the model will run it:
// packed, the sum of lengths; padded, count × longest (the newest is the longest, as the
// order is ascending). A sequence longer than the budget runs alone, so nothing waits forever.
void Embedder::embed_into(std::span<const std::span<const int32_t>> sequences, int64_t dims, std::span<float> out,
                          EmbedStats* stats) {
  const int64_t out_dims = dims ? dims : frontend_->dims();
  PRISM_CHECK_MSG(frontend_->check_dimensions(dims).ok(), "embed: dims the frontend refuses");
  PRISM_CHECK(out.size() == sequences.size() * size_t(out_dims));
  for (const auto& s : sequences)
    PRISM_CHECK_MSG(!s.empty() && int64_t(s.size()) <= frontend_->max_tokens(), "embed: unchecked sequence");

  order_.resize(sequences.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  std::stable_sort(order_.begin(), order_.end(),
                   [&](size_t a, size_t b) { return sequences[a].size() < sequences[b].size(); });

  EmbedStats local;
  size_t begin = 0;
  while (begin < order_.size()) {
    size_t end = begin;
    int64_t tokens = 0, longest = 0;
    while (end < order_.size() && int64_t(end - begin) < options_.max_batch_sequences) {
      const int64_t len = int64_t(sequences[order_[end]].size());
      const int64_t new_longest = std::max(longest, len);
      const int64_t cost = options_.packed ? tokens + len : int64_t(end - begin + 1) * new_longest;
      if (end > begin && cost > options_.max_batch_tokens) break;
      tokens += len;
      longest = new_longest;
      ++end;
    }
    run_micro_batch(sequences, begin, end, longest, out_dims, out, local);
    begin = end;
  }
  if (stats != nullptr) stats->add(local);
}

void Embedder::run_micro_batch(std::span<const std::span<const int32_t>> sequences, size_t begin, size_t end,
                               int64_t longest, int64_t out_dims, std::span<float> out, EmbedStats& stats) {
  const int64_t num_seqs = int64_t(end - begin);
  int64_t real_tokens = 0;
  for (size_t i = begin; i < end; ++i) real_tokens += int64_t(sequences[order_[i]].size());
  const int64_t rows = options_.packed ? real_tokens : num_seqs * longest;
  {
    ArenaScope scope(&arena_);
    models::EncoderBatch batch;
    batch.token_ids = Tensor::empty({rows}, DType::i32);             // [T] i32
    batch.cu_seqlens = Tensor::empty({num_seqs + 1}, DType::i32);    // [S + 1] i32
    if (!options_.packed) batch.kv_lens = Tensor::empty({num_seqs}, DType::i32);  // [S] i32
    int32_t* ids = batch.token_ids.data<int32_t>();
    int32_t* cu = batch.cu_seqlens.data<int32_t>();
    int64_t at = 0;
    cu[0] = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const std::span<const int32_t> seq = sequences[order_[begin + size_t(s)]];
      std::copy(seq.begin(), seq.end(), ids + at);
      const int64_t slot = options_.packed ? int64_t(seq.size()) : longest;
      std::fill(ids + at + int64_t(seq.size()), ids + at + slot, frontend_->pad_id());
      if (!options_.packed) batch.kv_lens.data<int32_t>()[s] = int32_t(seq.size());
      at += slot;
      cu[s + 1] = int32_t(at);
      stats.useful_flops += encoder_->flops(int64_t(seq.size()));
    }

    const Tensor hidden = encoder_->encode(batch);                                  // [T, H] f32
    Tensor pooled = models::pool(hidden, batch, frontend_->pooling());              // [S, H] f32
    finish_rows(pooled.contiguous().data<float>(), pooled.size(1),
                std::span<const size_t>(order_).subspan(begin, end - begin), out_dims, out);
  }
  arena_.reset();
  stats.sequences += num_seqs;
  stats.real_tokens += real_tokens;
  stats.padded_tokens += rows;
  stats.micro_batches += 1;
}

// NOTE: truncation comes before normalisation, so Matryoshka vectors are unit length; texts
// and images share this step, so both kinds of vector are finished alike.
void Embedder::finish_rows(const float* vectors, int64_t cols, std::span<const size_t> rows, int64_t out_dims,
                           std::span<float> out) {
  const int64_t n = int64_t(rows.size());
  finish_scratch_.resize(size_t(n * out_dims));
  float* f = finish_scratch_.data();
  for (int64_t r = 0; r < n; ++r) std::memcpy(f + r * out_dims, vectors + r * cols, size_t(out_dims) * sizeof(float));
  Tensor finished = Tensor::from_blob(f, {n, out_dims}, DType::f32);  // [n, out_dims] f32, borrowed
  if (frontend_->normalize()) models::l2_normalize_rows(finished);
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(out.data() + rows[size_t(r)] * size_t(out_dims), f + r * out_dims, size_t(out_dims) * sizeof(float));
}

// NOTE: the cache holds each image's full, unnormalised vector (rows 1, cols dims()) under
// (image_encoder_id_, key): a hit is exactly what the tower would give, and every requested
// dims is cut from it. Misses run in input order, max_batch_images at a time.
void Embedder::embed_images_into(std::span<const ImageRef> images, int64_t dims, std::span<float> out,
                                 EmbedStats* stats) {
  PRISM_CHECK_MSG(image_ != nullptr, "embed_images_into: this model takes no images");
  const int64_t out_dims = dims ? dims : frontend_->dims();
  const int64_t cols = frontend_->dims();
  PRISM_CHECK_MSG(frontend_->check_dimensions(dims).ok(), "embed_images_into: dims the frontend refuses");
  PRISM_CHECK(out.size() == images.size() * size_t(out_dims));
  const size_t view_floats = size_t(3) * size_t(frontend_->image_size()) * size_t(frontend_->image_size());
  for (const ImageRef& im : images)
    PRISM_CHECK_MSG(im.views != nullptr && im.views->num_views == 1 && im.views->values.size() == view_floats,
                    "embed_images_into: unchecked image");

  EmbedStats local;
  local.images = int64_t(images.size());
  MediaCache& cache = MediaCache::shared();
  features_.assign(images.size(), nullptr);
  std::vector<size_t> missing;                             // first image of each key the cache lacks
  std::unordered_map<media::MediaKey, size_t> first_of;    // key → its first image in this call
  std::vector<size_t> repeat_of(images.size(), SIZE_MAX);  // a later image with an earlier one's key
  for (size_t i = 0; i < images.size(); ++i) {
    const auto [it, inserted] = first_of.emplace(images[i].key, i);
    if (!inserted) {
      repeat_of[i] = it->second;
      continue;
    }
    ++local.cache_lookups;
    MediaFeaturesPtr hit = cache.find(image_encoder_id_, images[i].key);
    if (hit != nullptr && hit->rows == 1 && hit->cols == cols) {
      ++local.cache_hits;
      features_[i] = std::move(hit);
      continue;
    }
    missing.push_back(i);
  }
  for (size_t begin = 0; begin < missing.size(); begin += size_t(options_.max_batch_images)) {
    const size_t end = std::min(missing.size(), begin + size_t(options_.max_batch_images));
    run_image_batch(images, std::span<const size_t>(missing).subspan(begin, end - begin), local);
  }
  image_vectors_.resize(images.size() * size_t(cols));
  for (size_t i = 0; i < images.size(); ++i) {
    if (repeat_of[i] != SIZE_MAX) features_[i] = features_[repeat_of[i]];
    PRISM_CHECK(features_[i] != nullptr);
    std::copy_n(features_[i]->values.data(), cols, image_vectors_.data() + i * size_t(cols));
  }
  image_rows_.resize(images.size());
  std::iota(image_rows_.begin(), image_rows_.end(), size_t{0});
  finish_rows(image_vectors_.data(), cols, image_rows_, out_dims, out);
  features_.clear();
  if (stats != nullptr) stats->add(local);
}

void Embedder::run_image_batch(std::span<const ImageRef> images, std::span<const size_t> batch, EmbedStats& stats) {
  const int64_t n = int64_t(batch.size());
  const int64_t side = frontend_->image_size();
  const int64_t cols = frontend_->dims();
  const size_t view_floats = size_t(3 * side * side);
  {
    ArenaScope scope(&arena_);
    Tensor pixels = Tensor::empty({n, 3, side, side}, DType::f32);  // [V, 3, S, S] f32
    for (int64_t v = 0; v < n; ++v)
      std::memcpy(pixels.data<float>() + size_t(v) * view_floats, images[batch[size_t(v)]].views->values.data(),
                  view_floats * sizeof(float));
    const Tensor embeds = image_->embed_images(pixels).contiguous();  // [V, E] f32, unnormalised
    PRISM_CHECK(embeds.size(0) == n && embeds.size(1) == cols);
    for (int64_t v = 0; v < n; ++v) {
      auto f = std::make_shared<MediaFeatures>();
      f->rows = 1;
      f->cols = cols;
      f->values.assign(embeds.data<float>() + v * cols, embeds.data<float>() + (v + 1) * cols);
      const size_t i = batch[size_t(v)];
      MediaCache::shared().insert(image_encoder_id_, images[i].key, f);
      features_[i] = std::move(f);
    }
  }
  arena_.reset();
  stats.images_encoded += n;
  stats.image_batches += 1;
  stats.useful_flops += double(n) * image_->flops_per_image();
}

void Embedder::warm_up() {
  std::vector<int32_t> ids = {frontend_->pad_id()};
  if (auto t = frontend_->tokenize("warm up", /*truncate=*/true); t.has_value()) ids = std::move(t).value();
  views_.assign(1, ids);
  std::vector<float> out(size_t(frontend_->dims()));
  EmbedStats ignored;
  embed_into(views_, 0, out, &ignored);
  views_.clear();
  if (image_ == nullptr) return;
  {
    ArenaScope scope(&arena_);
    const int64_t side = frontend_->image_size();
    (void)image_->embed_images(Tensor::zeros({1, 3, side, side}, DType::f32));
  }
  arena_.reset();
}

}  // namespace prism::engines::encode

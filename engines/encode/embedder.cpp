// engines/encode/embedder.cpp: sort, cut into micro-batches, encode, pool, truncate,
// normalise, scatter back. No queues, no threads of its own (the encoder uses the OpenMP pool).
#include "engines/encode/embedder.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "models/bert/bert.h"
#include "models/encoder.h"
#include "models/pooling.h"

namespace prism::engines::encode {

Result<std::unique_ptr<Embedder>> Embedder::load(std::shared_ptr<const EmbedFrontend> frontend,
                                                 const EmbedderOptions& options) {
  PRISM_CHECK(frontend != nullptr);
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<models::Encoder> encoder,
                         models::load_bert(frontend->model_dir(), options.precision));
  return create(std::move(frontend), options, std::move(encoder));
}

Result<std::unique_ptr<Embedder>> Embedder::create(std::shared_ptr<const EmbedFrontend> frontend,
                                                   const EmbedderOptions& options,
                                                   std::unique_ptr<models::Encoder> encoder) {
  PRISM_CHECK(frontend != nullptr && encoder != nullptr);
  if (encoder->hidden_size() != frontend->dims())
    return invalid_argument("the encoder's hidden size " + std::to_string(encoder->hidden_size()) +
                            " is not the frontend's " + std::to_string(frontend->dims()) + " dims");
  if (encoder->max_tokens() < frontend->max_tokens())
    return invalid_argument("the encoder takes " + std::to_string(encoder->max_tokens()) +
                            " tokens, fewer than the frontend's maximum of " + std::to_string(frontend->max_tokens()));
  if (options.max_batch_tokens < 1 || options.max_batch_sequences < 1)
    return invalid_argument("max_batch_tokens and max_batch_sequences must be >= 1");
  std::unique_ptr<Embedder> e(new Embedder());
  e->frontend_ = std::move(frontend);
  e->options_ = options;
  e->encoder_ = std::move(encoder);
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
  if (stats != nullptr) {
    stats->sequences += local.sequences;
    stats->real_tokens += local.real_tokens;
    stats->padded_tokens += local.padded_tokens;
    stats->micro_batches += local.micro_batches;
    stats->useful_flops += local.useful_flops;
  }
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
    Tensor vectors = pooled.slice(1, 0, out_dims).contiguous();                     // [S, out_dims] f32
    if (frontend_->normalize()) models::l2_normalize_rows(vectors);
    const float* v = vectors.data<float>();
    for (int64_t s = 0; s < num_seqs; ++s)
      std::memcpy(out.data() + order_[begin + size_t(s)] * size_t(out_dims), v + s * out_dims,
                  size_t(out_dims) * sizeof(float));
  }
  arena_.reset();
  stats.sequences += num_seqs;
  stats.real_tokens += real_tokens;
  stats.padded_tokens += rows;
  stats.micro_batches += 1;
}

}  // namespace prism::engines::encode

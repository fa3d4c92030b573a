// models/whisper/whisper_decoder.cpp: Whisper's text decoder behind the Decoder interface.
// Weights loaded by checkpoint name and packed once (self-attention q/k/v fused into one
// linear); the forward pass is a straight line of runtime ops over the engine's flat batch:
// causal self-attention against the paged cache, cross-attention of each sequence over its
// own segment's CrossKv (batch.cross), GELU MLP, tied LM head. Computes only: no block
// allocation, scheduling, sampling or logit rules here.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "models/common/activation.h"
#include "models/common/batch_embedding.h"
#include "models/common/scratch_arena.h"
#include "models/common/transformer_layer.h"
#include "models/common/weight_loading.h"
#include "models/whisper/whisper.h"
#include "models/whisper/whisper_weights.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using formats::WeightSource;
using common::LayerNormWeights;

constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default, which Whisper keeps

// One decoder layer; fields named after the checkpoint's "model.decoder.layers.{i}.*".
struct DecoderLayer {
  LayerNormWeights self_attn_layer_norm;  // [d] f32
  // self_attn.{q,k,v}_proj stacked along out: [3 d, d], rows q, k (bias zero), v.
  ops::LinearWeight self_attn_qkv_proj;
  ops::LinearWeight self_attn_out_proj;  // [d, d]
  LayerNormWeights encoder_attn_layer_norm;
  ops::LinearWeight encoder_attn_q_proj;    // [d, d]; its k/v projections are the encoder's
  ops::LinearWeight encoder_attn_out_proj;  // [d, d]
  LayerNormWeights final_layer_norm;
  ops::LinearWeight fc1;  // [ffn, d], activation fused
  ops::LinearWeight fc2;  // [d, ffn]
};

struct DecoderWeights {
  Tensor embed_tokens;     // [vocab, d] in the checkpoint's dtype (bf16 / f16 stay so)
  Tensor embed_positions;  // [max_target_positions, d], likewise
  std::vector<DecoderLayer> layers;
  LayerNormWeights layer_norm;  // [d]
  ops::LinearWeight proj_out;   // [vocab, d]: proj_out.weight, or embed_tokens when tied
};

Result<DecoderLayer> load_layer(const WeightSource& src, const std::string& p, const configs::WhisperConfig& c,
                                ops::Precision precision) {
  const int64_t d = c.d_model, ffn = c.decoder_ffn_dim;
  DecoderLayer L;
  PRISM_ASSIGN_OR_RETURN(L.self_attn_layer_norm, common::load_layer_norm(src, p + "self_attn_layer_norm", d));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_qkv_proj, whisper::load_self_attn_qkv(src, p, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_out_proj, whisper::load_linear(src, p + "self_attn.out_proj", d, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.encoder_attn_layer_norm, common::load_layer_norm(src, p + "encoder_attn_layer_norm", d));
  PRISM_ASSIGN_OR_RETURN(L.encoder_attn_q_proj, whisper::load_linear(src, p + "encoder_attn.q_proj", d, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.encoder_attn_out_proj,
                         whisper::load_linear(src, p + "encoder_attn.out_proj", d, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.final_layer_norm, common::load_layer_norm(src, p + "final_layer_norm", d));
  PRISM_ASSIGN_OR_RETURN(L.fc1, whisper::load_linear(src, p + "fc1", ffn, d, precision));
  PRISM_ASSIGN_OR_RETURN(L.fc2, whisper::load_linear(src, p + "fc2", d, ffn, precision));
  return L;
}

Result<DecoderWeights> load_weights(const WeightSource& src, const configs::WhisperConfig& c, ops::Precision precision) {
  const std::string p = whisper::checkpoint_prefix(src, "decoder.embed_tokens.weight");
  const std::string dec = p + "decoder.";
  const int64_t d = c.d_model;
  DecoderWeights w;
  PRISM_ASSIGN_OR_RETURN(w.embed_tokens, common::load_table(src, dec + "embed_tokens.weight", {c.vocab_size, d}));
  PRISM_ASSIGN_OR_RETURN(w.embed_positions,
                         common::load_table(src, dec + "embed_positions.weight", {c.max_target_positions, d}));
  for (int64_t i = 0; i < c.decoder_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(DecoderLayer layer,
                           load_layer(src, dec + "layers." + std::to_string(i) + ".", c, precision));
    w.layers.push_back(std::move(layer));
  }
  PRISM_ASSIGN_OR_RETURN(w.layer_norm, common::load_layer_norm(src, dec + "layer_norm", d));
  // NOTE: proj_out is tied to embed_tokens and transformers drops it on save; an export that
  // writes it anyway is read (it equals the table).
  if (src.contains("proj_out.weight")) {
    PRISM_ASSIGN_OR_RETURN(const Tensor head, common::load_table(src, "proj_out.weight", {c.vocab_size, d}));
    PRISM_ASSIGN_OR_RETURN(w.proj_out, ops::pack_linear(head, Tensor(), precision));
  } else {
    PRISM_ASSIGN_OR_RETURN(w.proj_out, ops::pack_linear(w.embed_tokens, Tensor(), precision));
  }
  return w;
}

class WhisperDecoder final : public Decoder {
 public:
  WhisperDecoder(configs::WhisperConfig config, DecoderWeights weights) : c_(std::move(config)), w_(std::move(weights)) {}

  Tensor forward(const DecoderBatch& batch, std::span<const KvLayer> kv) override;
  Tensor embed(const Tensor& token_ids) const override { return ops::embedding(w_.embed_tokens, token_ids); }
  KvSpec kv_spec() const override {
    return {int(c_.decoder_layers), int(c_.decoder_heads), int(c_.decoder_head_dim())};
  }
  int64_t vocab_size() const override { return c_.vocab_size; }
  int64_t hidden_size() const override { return c_.d_model; }
  int64_t max_context() const override { return c_.max_target_positions; }
  int64_t weight_bytes() const override;
  int64_t resident_weight_bytes() const override;
  double flops(int64_t tokens, int64_t context) const override;

 private:
  void check_batch(const DecoderBatch& batch, std::span<const KvLayer> kv) const;
  Tensor embed_batch(const DecoderBatch& batch) const;
  Tensor cross_attention(const Tensor& q, const DecoderBatch& batch, int64_t layer) const;
  void layer_forward(const DecoderLayer& L, int64_t layer, Tensor& x, const DecoderBatch& batch,
                     const KvLayer& kv) const;

  configs::WhisperConfig c_;
  DecoderWeights w_;
};

void WhisperDecoder::check_batch(const DecoderBatch& batch, std::span<const KvLayer> kv) const {
  const Tensor& ids = batch.token_ids;
  PRISM_CHECK_MSG(ids.dim() == 1 && ids.dtype() == DType::i32 && ids.is_contiguous(),
                  "forward: token_ids must be [T] i32");
  PRISM_CHECK_MSG(int64_t(kv.size()) == c_.decoder_layers, "forward: one KvLayer per layer");
  PRISM_CHECK_MSG(batch.logits_rows.dim() == 1 && batch.logits_rows.dtype() == DType::i32 &&
                      batch.logits_rows.is_contiguous(), "forward: logits_rows must be [N] i32");
  const int64_t t = ids.size(0);
  PRISM_CHECK_MSG(batch.logits_rows.size(0) <= t, "forward: more logits_rows than tokens");
  if (t == 0) return;
  const Tensor& pos = batch.positions;
  PRISM_CHECK_MSG(pos.dim() == 1 && pos.size(0) == t && pos.dtype() == DType::i32 && pos.is_contiguous(),
                  "forward: positions must be [T] i32");
  const int32_t* p = pos.data<int32_t>();
  for (int64_t i = 0; i < t; ++i)
    PRISM_CHECK_MSG(p[i] >= 0 && p[i] < c_.max_target_positions, "forward: position past max_context()");
  const Tensor& cu = batch.cu_seqlens_q;
  PRISM_CHECK_MSG(cu.dim() == 1 && cu.dtype() == DType::i32 && cu.is_contiguous() && cu.size(0) >= 2,
                  "forward: cu_seqlens_q must be [S + 1] i32");
  const int64_t num_seqs = cu.size(0) - 1;
  PRISM_CHECK_MSG(int64_t(batch.cross.size()) == num_seqs,
                  "forward: Whisper needs one CrossKv per sequence (batch.cross)");
  const int64_t heads = c_.decoder_heads, head_dim = c_.decoder_head_dim();
  for (const CrossKv* m : batch.cross) {
    PRISM_CHECK_MSG(m != nullptr && int64_t(m->k.size()) == c_.decoder_layers && m->v.size() == m->k.size(),
                    "forward: a CrossKv needs k and v for every decoder layer");
    PRISM_CHECK_MSG(m->frames > 0 && m->frames <= c_.max_source_positions, "forward: CrossKv frames out of range");
    const Dims want{m->frames, heads, head_dim};
    for (int64_t l = 0; l < c_.decoder_layers; ++l)
      PRISM_CHECK_MSG(m->k[l].shape() == want && m->v[l].shape() == want && m->k[l].dtype() == DType::f32 &&
                          m->v[l].dtype() == DType::f32,
                      "forward: CrossKv k / v must be [frames, decoder heads, head_dim] f32");
  }
}

// [T, d] f32: token embeddings (or batch.input_embeddings where the id is -1) + positions.
Tensor WhisperDecoder::embed_batch(const DecoderBatch& batch) const {
  Tensor x = common::embed_batch(w_.embed_tokens, batch, c_.d_model);
  {
    ArenaScope scope(&common::scratch_arena());
    ops::add_(x, ops::embedding(w_.embed_positions, batch.positions));  // + [T, d] positions, in place
  }
  common::scratch_arena().reset();
  return x;
}

// q [T, heads, head_dim] → [T, heads, head_dim]: each sequence's queries attend every frame
// of its own segment's memory (batch.cross[s], layer `layer`).
// NOTE: one attention call per sequence: the memories are separate tensors (a segment's
// CrossKv lives as long as its request), so they cannot be one varlen key range. A decode
// step's single query still spreads over the threads: the kernel splits long key ranges.
Tensor WhisperDecoder::cross_attention(const Tensor& q, const DecoderBatch& batch, int64_t layer) const {
  const int64_t t = q.size(0);
  const int32_t* cu = batch.cu_seqlens_q.data<int32_t>();
  const int64_t num_seqs = batch.cu_seqlens_q.size(0) - 1;
  Tensor out = Tensor::empty(q.shape(), DType::f32);
  Tensor cu_q = Tensor::empty({2}, DType::i32), cu_k = Tensor::empty({2}, DType::i32);
  int32_t* pq = cu_q.data<int32_t>();
  int32_t* pk = cu_k.data<int32_t>();
  pq[0] = pk[0] = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t begin = cu[s], end = cu[s + 1];
    PRISM_CHECK_MSG(begin <= end && end <= t, "forward: cu_seqlens_q past the batch");
    if (begin == end) continue;
    const CrossKv& memory = *batch.cross[s];
    pq[1] = int32_t(end - begin);
    pk[1] = int32_t(memory.frames);
    const Tensor a = ops::attention(q.slice(0, begin, end), memory.k[layer], memory.v[layer], {cu_q, cu_k, Tensor()},
                                    ops::AttentionParams{.scale = 0.0f, .causal = false});
    out.slice(0, begin, end).copy_from(a);
  }
  return out;
}

// One pre-LN layer, the residual stream x [T, d] updated in place; intermediates in the
// current (scratch) arena.
void WhisperDecoder::layer_forward(const DecoderLayer& L, int64_t layer, Tensor& x, const DecoderBatch& batch,
                                   const KvLayer& kv) const {
  const int64_t t = x.size(0), heads = c_.decoder_heads, head_dim = c_.decoder_head_dim(), d = c_.d_model;
  const Tensor h = common::layer_norm(x, L.self_attn_layer_norm, kLayerNormEps);
  const Tensor qkv = ops::linear(h, L.self_attn_qkv_proj).view({t, 3 * heads, head_dim});  // [T, 3 H, D]
  const Tensor q = qkv.slice(1, 0, heads);  // [T, H, D] strided views of qkv
  const Tensor k = qkv.slice(1, heads, 2 * heads);
  const Tensor v = qkv.slice(1, 2 * heads, 3 * heads);
  ops::PagedKv cache{kv.k, kv.v, kv.k_scale, kv.v_scale, batch.block_tables, batch.context_lens};
  ops::store_kv(k, v, batch.slot_mapping, cache);
  const Tensor self = ops::paged_attention(q, batch.cu_seqlens_q, cache);  // [T, H, D], causal
  ops::add_(x, ops::linear(self.view({t, d}), L.self_attn_out_proj));

  const Tensor h2 = common::layer_norm(x, L.encoder_attn_layer_norm, kLayerNormEps);
  const Tensor cq = ops::linear(h2, L.encoder_attn_q_proj).view({t, heads, head_dim});
  const Tensor cross = cross_attention(cq, batch, layer);
  ops::add_(x, ops::linear(cross.view({t, d}), L.encoder_attn_out_proj));

  const Tensor h3 = common::layer_norm(x, L.final_layer_norm, kLayerNormEps);
  ops::add_(x, ops::linear(ops::linear(h3, L.fc1, common::op_activation(c_.activation)), L.fc2));
}

Tensor WhisperDecoder::forward(const DecoderBatch& batch, std::span<const KvLayer> kv) {
  check_batch(batch, kv);
  const int64_t t = batch.token_ids.size(0), num_rows = batch.logits_rows.size(0);
  if (t == 0) return Tensor::empty({0, c_.vocab_size}, DType::f32);
  Arena* const result_arena = current_arena();  // the caller's (null: heap)
  Tensor x = embed_batch(batch);                // [T, d] f32, the residual stream
  Arena& scratch = common::scratch_arena();
  for (int64_t l = 0; l < c_.decoder_layers; ++l) {
    scratch.reset();
    ArenaScope scope(&scratch);
    layer_forward(w_.layers[l], l, x, batch, kv[l]);
  }
  scratch.reset();
  if (num_rows == 0) return Tensor::empty({0, c_.vocab_size}, DType::f32);  // K/V written: a chunk mid-prompt
  Tensor normed;
  {
    ArenaScope scope(&scratch);
    normed = common::layer_norm(ops::gather_rows(x, batch.logits_rows), w_.layer_norm, kLayerNormEps);  // [N, d]
  }
  ArenaScope scope(result_arena);
  return ops::linear(normed, w_.proj_out);  // [N, vocab] f32
}

int64_t WhisperDecoder::weight_bytes() const {
  using common::linear_bytes;
  int64_t bytes = linear_bytes(w_.proj_out);
  for (const DecoderLayer& L : w_.layers)
    bytes += linear_bytes(L.self_attn_qkv_proj) + linear_bytes(L.self_attn_out_proj) +
             linear_bytes(L.encoder_attn_q_proj) + linear_bytes(L.encoder_attn_out_proj) + linear_bytes(L.fc1) +
             linear_bytes(L.fc2);
  return bytes;
}

int64_t WhisperDecoder::resident_weight_bytes() const {
  const int64_t norms = (3 * c_.decoder_layers + 1) * 2 * c_.d_model * int64_t(sizeof(float));
  return weight_bytes() + int64_t(w_.embed_tokens.nbytes()) + int64_t(w_.embed_positions.nbytes()) + norms;
}

// NOTE: 2 x multiply-adds of the matmuls. Per layer and token: self q/k/v (3 d²) and out
// (d²), cross q and out (2 d²), fc1 / fc2 (2 d ffn). Self-attention: new token i (0-based)
// attends context + i + 1 keys at 2 d each (q kᵀ and p v); cross-attention: every token
// attends max_source_positions frames at 2 d each.
double WhisperDecoder::flops(int64_t tokens, int64_t context) const {
  const double n = double(tokens), d = double(c_.d_model), ffn = double(c_.decoder_ffn_dim);
  const double per_token = 6 * d * d + 2 * d * ffn;
  const double keys = n * double(context) + n * (n + 1) / 2;
  const double frames = n * double(c_.max_source_positions);
  return 2.0 * double(c_.decoder_layers) * (per_token * n + 2 * d * keys + 2 * d * frames);
}

}  // namespace

Result<std::unique_ptr<Decoder>> load_whisper_decoder(const std::string& dir, ops::Precision precision) {
  ArenaScope no_arena(nullptr);  // weights outlive every forward's arena
  PRISM_ASSIGN_OR_RETURN(const configs::WhisperConfig config, configs::WhisperConfig::load(dir));
  PRISM_ASSIGN_OR_RETURN(const WeightSource src, WeightSource::open(dir));
  Result<DecoderWeights> weights = load_weights(src, config, precision);
  if (!weights) return common::in_dir(dir, weights.status());
  return std::unique_ptr<Decoder>(new WhisperDecoder(config, std::move(*weights)));
}

}  // namespace prism::models

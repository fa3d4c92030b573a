// models/llama/llama.cpp: the Llama-family decoder. Weights loaded by checkpoint name and
// packed once (q/k/v fused into one linear, gate/up into another: four GEMMs a layer); the
// forward pass is a straight line of runtime ops over the engine's flat batch, the layer's two
// halves (llama_layer.h) around the paged attention. Computes only: no block allocation,
// scheduling or sampling here.
#include "models/llama/llama.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "models/common/batch_embedding.h"
#include "models/common/scratch_arena.h"
#include "models/common/weight_loading.h"
#include "models/llama/llama_layer.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using formats::WeightSource;
using llama::LlamaLayer;

struct LlamaWeights {
  Tensor embed_tokens;  // [vocab, hidden] in the checkpoint's dtype (bf16 stays bf16)
  Tensor norm;          // [hidden] f32
  ops::LinearWeight lm_head;  // [vocab, hidden]: lm_head.weight, or embed_tokens when tied
  std::vector<LlamaLayer> layers;
};

Result<LlamaWeights> load_weights(const WeightSource& src, const configs::LlamaConfig& c, const LlamaWeightNames& names,
                                  ops::Precision precision) {
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  LlamaWeights w;
  PRISM_ASSIGN_OR_RETURN(w.embed_tokens, common::load_table(src, names.prefix + "embed_tokens.weight", {vocab, h}));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(LlamaLayer layer, llama::load_layer(src, c, names.prefix, i, precision));
    w.layers.push_back(std::move(layer));
  }
  PRISM_ASSIGN_OR_RETURN(w.norm, common::load_f32(src, names.prefix + "norm.weight", {h}));
  // NOTE: a tied checkpoint has no lm_head.weight (transformers drops it on save); some
  // exporters write it anyway, equal to embed_tokens, so a present one is used either way.
  if (src.contains(names.lm_head) || !c.tie_word_embeddings) {
    constexpr std::string_view kSuffix = ".weight";
    const std::string& head = names.lm_head;
    const std::string base = head.ends_with(kSuffix) ? head.substr(0, head.size() - kSuffix.size()) : head;
    PRISM_ASSIGN_OR_RETURN(w.lm_head, llama::stacked_linear(src, {base}, {vocab}, h, false, precision));
  } else {
    PRISM_ASSIGN_OR_RETURN(w.lm_head, ops::pack_linear(w.embed_tokens, Tensor(), precision));
  }
  return w;
}

class LlamaDecoder final : public Decoder {
 public:
  LlamaDecoder(configs::LlamaConfig config, LlamaWeights weights)
      : c_(std::move(config)), w_(std::move(weights)),
        rope_(ops::make_rope_table(llama::scaled_rope_inv_freq(c_), c_.max_context())) {}

  Tensor forward(const DecoderBatch& batch, std::span<const KvLayer> kv) override;
  Tensor embed(const Tensor& token_ids) const override { return ops::embedding(w_.embed_tokens, token_ids); }
  KvSpec kv_spec() const override {
    return {int(c_.num_hidden_layers), int(c_.num_key_value_heads), int(c_.head_dim)};
  }
  int64_t vocab_size() const override { return c_.vocab_size; }
  int64_t hidden_size() const override { return c_.hidden_size; }
  int64_t max_context() const override { return c_.max_context(); }
  int64_t weight_bytes() const override;
  int64_t resident_weight_bytes() const override;
  double flops(int64_t tokens, int64_t context) const override;

 private:
  void layer_forward(const LlamaLayer& L, Tensor& x, const DecoderBatch& batch, const KvLayer& kv) const;

  configs::LlamaConfig c_;
  LlamaWeights w_;
  ops::RopeTable rope_;  // [max_context, D / 2]
};

// One pre-norm layer, the residual stream x [T, hidden] updated in place; intermediates in
// the current (scratch) arena.
void LlamaDecoder::layer_forward(const LlamaLayer& L, Tensor& x, const DecoderBatch& batch, const KvLayer& kv) const {
  const llama::AttentionInputs a = llama::attention_inputs(L, c_, x, batch.positions, rope_);
  ops::PagedKv cache{kv.k, kv.v, kv.k_scale, kv.v_scale, batch.block_tables, batch.context_lens};
  ops::store_kv(a.k, a.v, batch.slot_mapping, cache);
  llama::finish_layer(L, c_, x, ops::paged_attention(a.q, batch.cu_seqlens_q, cache));  // attention [T, Hq, D]
}

Tensor LlamaDecoder::forward(const DecoderBatch& batch, std::span<const KvLayer> kv) {
  const Tensor& ids = batch.token_ids;
  PRISM_CHECK_MSG(ids.dim() == 1 && ids.dtype() == DType::i32 && ids.is_contiguous(), "forward: token_ids must be [T] i32");
  PRISM_CHECK_MSG(int64_t(kv.size()) == c_.num_hidden_layers, "forward: one KvLayer per layer");
  PRISM_CHECK_MSG(batch.logits_rows.dim() == 1 && batch.logits_rows.dtype() == DType::i32 &&
                      batch.logits_rows.is_contiguous(), "forward: logits_rows must be [N] i32");
  const int64_t t = ids.size(0);
  if (t > 0) {
    const Tensor& pos = batch.positions;
    PRISM_CHECK_MSG(pos.dim() == 1 && pos.size(0) == t && pos.dtype() == DType::i32 && pos.is_contiguous(),
                    "forward: positions must be [T] i32");
    const int32_t* p = pos.data<int32_t>();
    for (int64_t i = 0; i < t; ++i)
      PRISM_CHECK_MSG(p[i] >= 0 && p[i] < c_.max_context(), "forward: position past max_context()");
  }
  const int64_t num_rows = batch.logits_rows.size(0);
  PRISM_CHECK_MSG(num_rows <= t, "forward: more logits_rows than tokens");
  if (t == 0) return Tensor::empty({0, c_.vocab_size}, DType::f32);
  Arena* const result_arena = current_arena();  // the caller's (null: heap)
  Tensor x = common::embed_batch(w_.embed_tokens, batch, c_.hidden_size);  // [T, hidden] f32, the residual stream
  Arena& scratch = common::scratch_arena();
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    scratch.reset();
    ArenaScope scope(&scratch);
    layer_forward(w_.layers[l], x, batch, kv[l]);
  }
  scratch.reset();
  if (num_rows == 0) return Tensor::empty({0, c_.vocab_size}, DType::f32);  // K/V written: a chunk mid-prompt
  Tensor normed;
  {
    ArenaScope scope(&scratch);
    normed = ops::rms_norm(ops::gather_rows(x, batch.logits_rows), w_.norm, float(c_.rms_norm_eps));  // [N, hidden]
  }
  ArenaScope scope(result_arena);
  return ops::linear(normed, w_.lm_head);  // [N, vocab] f32
}

int64_t LlamaDecoder::weight_bytes() const {
  int64_t bytes = common::linear_bytes(w_.lm_head);
  for (const LlamaLayer& L : w_.layers) bytes += llama::layer_linear_bytes(L);
  return bytes;
}

int64_t LlamaDecoder::resident_weight_bytes() const {
  const int64_t qk_norms = c_.qk_norm ? 2 * c_.num_hidden_layers * c_.head_dim : 0;
  const int64_t norms = ((2 * c_.num_hidden_layers + 1) * c_.hidden_size + qk_norms) * int64_t(sizeof(float));
  return weight_bytes() + int64_t(w_.embed_tokens.nbytes()) + norms;
}

// NOTE: 2 x multiply-adds of the matmuls. Per layer and token: the projections
// (llama::layer_macs_per_token). Attention: new token i (0-based) attends context + i + 1
// keys, q k^T and p v costing Hq D each per key. Norms, RoPE, softmax and SwiGLU are O(T H).
double LlamaDecoder::flops(int64_t tokens, int64_t context) const {
  const double n = double(tokens), qd = double(c_.num_attention_heads * c_.head_dim);
  const double per_token = llama::layer_macs_per_token(c_);
  const double keys = n * double(context) + n * (n + 1) / 2;
  return 2.0 * double(c_.num_hidden_layers) * (per_token * n + 2 * qd * keys);
}

}  // namespace

Result<std::unique_ptr<Decoder>> load_llama(const formats::WeightSource& weights, const configs::LlamaConfig& config,
                                            const LlamaWeightNames& names, ops::Precision precision) {
  ArenaScope no_arena(nullptr);  // weights and the RoPE table outlive every forward's arena
  PRISM_ASSIGN_OR_RETURN(LlamaWeights loaded, load_weights(weights, config, names, precision));
  return std::unique_ptr<Decoder>(new LlamaDecoder(config, std::move(loaded)));
}

Result<std::unique_ptr<Decoder>> load_llama(const std::string& dir, ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const configs::LlamaConfig config, configs::LlamaConfig::load(dir));
  PRISM_ASSIGN_OR_RETURN(const WeightSource src, WeightSource::open(dir));
  // A base-model checkpoint (Qwen3Model, ...) has its stack unprefixed and, tied, no LM head of its own.
  Result<std::string> prefix = llama::detect_prefix(src);
  if (!prefix) return common::in_dir(dir, prefix.status());
  Result<std::unique_ptr<Decoder>> model = load_llama(src, config, LlamaWeightNames{.prefix = *prefix}, precision);
  if (!model) return common::in_dir(dir, model.status());
  return model;
}

}  // namespace prism::models

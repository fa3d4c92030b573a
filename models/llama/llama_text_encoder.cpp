// models/llama/llama_text_encoder.cpp: the Llama-family stack as a text encoder
// (llama_text_encoder.h). The layer is llama_layer.h's, the decoder's own; only the attention
// between its halves differs: ops::attention over the batch's own tokens, causal, instead of
// the paged cache. Must not grow a second copy of the layer.
#include "models/llama/llama_text_encoder.h"

#include <utility>
#include <vector>

#include "configs/llama_config.h"
#include "formats/safetensors.h"
#include "models/common/scratch_arena.h"
#include "models/common/weight_loading.h"
#include "models/llama/llama_layer.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using formats::WeightSource;
using llama::LlamaLayer;

// NOTE (memory): only what hidden_states[i] depends on is loaded: embed_tokens, layers
// [0, i) and the final norm when i = L. No LM head: the decoder packs a second copy of a tied
// embedding table as its head, the encoder keeps the table alone. For Z-Image's Qwen3-4B in
// bf16 (36 layers of 100.9 M parameters, a 151936 x 2560 table) with hidden_states[-2], that
// leaves out layer 35 (202 MB) and the head's copy (778 MB): 7.84 GB resident instead of the
// decoder's 8.82 GB, about 1 GB of a 24 GB machine.
struct EncoderWeights {
  Tensor embed_tokens;  // [vocab, hidden] in the checkpoint's dtype
  std::vector<LlamaLayer> layers;  // the first num_layers_run
  Tensor norm;  // [hidden] f32 when the last layer's normed output is asked for, else undefined
};

Result<EncoderWeights> load_weights(const WeightSource& src, const configs::LlamaConfig& c, int64_t num_layers_run,
                                    bool final_norm, ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const std::string prefix, llama::detect_prefix(src));
  EncoderWeights w;
  PRISM_ASSIGN_OR_RETURN(w.embed_tokens,
                         common::load_table(src, prefix + "embed_tokens.weight", {c.vocab_size, c.hidden_size}));
  for (int64_t i = 0; i < num_layers_run; ++i) {
    PRISM_ASSIGN_OR_RETURN(LlamaLayer layer, llama::load_layer(src, c, prefix, i, precision));
    w.layers.push_back(std::move(layer));
  }
  if (final_norm) {
    PRISM_ASSIGN_OR_RETURN(w.norm, common::load_f32(src, prefix + "norm.weight", {c.hidden_size}));
  }
  return w;
}

class LlamaTextEncoder final : public Encoder {
 public:
  LlamaTextEncoder(configs::LlamaConfig config, EncoderWeights weights)
      : c_(std::move(config)), w_(std::move(weights)),
        rope_(ops::make_rope_table(llama::scaled_rope_inv_freq(c_), c_.max_context())) {}

  Tensor encode(const EncoderBatch& batch) const override;
  int64_t hidden_size() const override { return c_.hidden_size; }
  int64_t max_tokens() const override { return c_.max_context(); }
  // NOTE: 2 x multiply-adds of the matmuls of the layers run: the projections per token
  // (llama::layer_macs_per_token) and causal attention, token i (0-based) attending i + 1 keys
  // at 2 Hq D each.
  double flops(int64_t length) const override {
    const double n = double(length), qd = double(c_.num_attention_heads * c_.head_dim);
    const double layers = double(w_.layers.size());
    return 2.0 * layers * (llama::layer_macs_per_token(c_) * n + 2.0 * qd * n * (n + 1) / 2);
  }

 private:
  Tensor positions(const EncoderBatch& batch) const;

  configs::LlamaConfig c_;
  EncoderWeights w_;
  ops::RopeTable rope_;  // [max_context, D / 2]
};

// [T] i32 on the heap: each token's index within its sequence of cu_seqlens (a right-padded
// slot counts from its first real token, as transformers' default position_ids do).
Tensor LlamaTextEncoder::positions(const EncoderBatch& batch) const {
  const Tensor& cu_seqlens = batch.cu_seqlens;
  PRISM_CHECK_MSG(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 1 && cu_seqlens.dtype() == DType::i32 &&
                      cu_seqlens.is_contiguous(),
                  "encode: cu_seqlens must be [S + 1] i32");
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t num_seqs = cu_seqlens.size(0) - 1, t = batch.token_ids.size(0);
  PRISM_CHECK_MSG(cu[0] == 0 && cu[num_seqs] == t, "encode: cu_seqlens must span token_ids from 0");
  ArenaScope heap(nullptr);
  Tensor pos = Tensor::empty({t}, DType::i32);
  int32_t* p = pos.data<int32_t>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    PRISM_CHECK_MSG(cu[s + 1] >= cu[s] && cu[s + 1] - cu[s] <= c_.max_context(),
                    "encode: a sequence is longer than max_tokens()");
    for (int32_t i = cu[s]; i < cu[s + 1]; ++i) p[i] = i - cu[s];
  }
  return pos;
}

// NOTE: the residual stream lives in the caller's arena and is updated in place layer by
// layer; each layer's intermediates live in the per-thread scratch arena, reset per layer, so
// memory is one layer's activations whatever the depth (as in the decoder).
Tensor LlamaTextEncoder::encode(const EncoderBatch& batch) const {
  const Tensor& ids = batch.token_ids;
  PRISM_CHECK_MSG(ids.dim() == 1 && ids.dtype() == DType::i32 && ids.is_contiguous(), "encode: token_ids must be [T] i32");
  if (ids.size(0) == 0) return Tensor::empty({0, c_.hidden_size}, DType::f32);
  const Tensor pos = positions(batch);  // [T] i32
  Arena* const result_arena = current_arena();  // the caller's (null: heap)
  Tensor x = ops::embedding(w_.embed_tokens, ids);  // [T, hidden] f32, the residual stream
  const ops::AttentionSeqs seqs{batch.cu_seqlens, batch.cu_seqlens, batch.kv_lens};
  const ops::AttentionParams causal{.scale = 0.0f, .causal = true};
  Arena& scratch = common::scratch_arena();
  for (const LlamaLayer& L : w_.layers) {
    scratch.reset();
    ArenaScope scope(&scratch);
    const llama::AttentionInputs a = llama::attention_inputs(L, c_, x, pos, rope_);
    llama::finish_layer(L, c_, x, ops::attention(a.q, a.k, a.v, seqs, causal));  // attention [T, Hq, D]
  }
  scratch.reset();
  if (!w_.norm.defined()) return x;
  ArenaScope scope(result_arena);
  return ops::rms_norm(x, w_.norm, float(c_.rms_norm_eps));
}

}  // namespace

Result<std::unique_ptr<Encoder>> load_llama_text_encoder(const std::string& dir, ops::Precision precision,
                                                         const LlamaTextEncoderOptions& options) {
  ArenaScope no_arena(nullptr);  // weights and the RoPE table outlive every forward's arena
  PRISM_ASSIGN_OR_RETURN(const configs::LlamaConfig config, configs::LlamaConfig::load(dir));
  const int64_t num_layers = config.num_hidden_layers;
  const int64_t index = options.hidden_states_index;
  if (index < -(num_layers + 1) || index > num_layers)
    return invalid_argument(dir + ": hidden_states_index " + std::to_string(index) + " is outside [" +
                            std::to_string(-(num_layers + 1)) + ", " + std::to_string(num_layers) + "] for " +
                            std::to_string(num_layers) + " layers");
  const int64_t num_layers_run = index < 0 ? num_layers + 1 + index : index;
  PRISM_ASSIGN_OR_RETURN(const WeightSource src, WeightSource::open(dir));
  Result<EncoderWeights> weights = load_weights(src, config, num_layers_run, num_layers_run == num_layers, precision);
  if (!weights) return common::in_dir(dir, weights.status());
  return std::unique_ptr<Encoder>(new LlamaTextEncoder(config, std::move(weights).value()));
}

}  // namespace prism::models

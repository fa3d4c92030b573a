// models/llama/llama.cpp: the Llama-family decoder. Weights loaded by checkpoint name and
// packed once (q/k/v fused into one linear, gate/up into another: four GEMMs a layer); the
// forward pass is a straight line of runtime ops over the engine's flat batch. Computes only:
// no block allocation, scheduling or sampling here.
#include "models/llama/llama.h"

#include <cmath>
#include <numbers>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "models/common/batch_embedding.h"
#include "models/common/scratch_arena.h"
#include "models/common/weight_loading.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using formats::WeightSource;

// One decoder layer; fields named after the checkpoint's "model.layers.{i}.*" tensors.
struct LlamaLayer {
  Tensor input_layernorm;           // [hidden] f32
  Tensor post_attention_layernorm;  // [hidden] f32
  // self_attn.{q,k,v}_proj stacked along out: [(Hq + 2 Hkv) * D, hidden], rows q, k, v.
  ops::LinearWeight self_attn_qkv_proj;
  ops::LinearWeight self_attn_o_proj;  // [hidden, Hq * D]
  // mlp.{gate,up}_proj stacked along out: [2 * intermediate, hidden], rows gate, then up.
  ops::LinearWeight mlp_gate_up_proj;
  ops::LinearWeight mlp_down_proj;  // [hidden, intermediate]
};

struct LlamaWeights {
  Tensor embed_tokens;  // [vocab, hidden] in the checkpoint's dtype (bf16 stays bf16)
  Tensor norm;          // [hidden] f32
  ops::LinearWeight lm_head;  // [vocab, hidden]: lm_head.weight, or embed_tokens when tied
  std::vector<LlamaLayer> layers;
};

// common::load_linear in the checkpoint's float dtype: a bf16 checkpoint is not widened to f32
// before packing.
Result<ops::LinearWeight> stacked_linear(const WeightSource& src, const std::vector<std::string>& bases,
                                         const std::vector<int64_t>& outs, int64_t in, bool with_bias,
                                         ops::Precision precision) {
  return common::load_linear(src, bases, outs, in, with_bias, precision,
                             common::stored_float_dtype(src, bases[0] + ".weight"));
}

Result<LlamaLayer> load_layer(const WeightSource& src, const configs::LlamaConfig& c, const std::string& prefix, int64_t i,
                              ops::Precision precision) {
  const std::string p = prefix + "layers." + std::to_string(i) + ".";
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_out = c.num_attention_heads * c.head_dim, kv_out = c.num_key_value_heads * c.head_dim;
  LlamaLayer L;
  PRISM_ASSIGN_OR_RETURN(L.input_layernorm, common::load_f32(src, p + "input_layernorm.weight", {h}));
  PRISM_ASSIGN_OR_RETURN(L.post_attention_layernorm, common::load_f32(src, p + "post_attention_layernorm.weight", {h}));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_qkv_proj,
                         stacked_linear(src, {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"},
                                        {q_out, kv_out, kv_out}, h, c.q_k_v_bias, precision));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_o_proj,
                         stacked_linear(src, {p + "self_attn.o_proj"}, {h}, q_out, c.o_bias, precision));
  PRISM_ASSIGN_OR_RETURN(L.mlp_gate_up_proj, stacked_linear(src, {p + "mlp.gate_proj", p + "mlp.up_proj"},
                                                            {inter, inter}, h, c.mlp_bias, precision));
  PRISM_ASSIGN_OR_RETURN(L.mlp_down_proj,
                         stacked_linear(src, {p + "mlp.down_proj"}, {h}, inter, c.mlp_bias, precision));
  return L;
}

Result<LlamaWeights> load_weights(const WeightSource& src, const configs::LlamaConfig& c, const LlamaWeightNames& names,
                                  ops::Precision precision) {
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  LlamaWeights w;
  PRISM_ASSIGN_OR_RETURN(w.embed_tokens, common::load_table(src, names.prefix + "embed_tokens.weight", {vocab, h}));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(LlamaLayer layer, load_layer(src, c, names.prefix, i, precision));
    w.layers.push_back(std::move(layer));
  }
  PRISM_ASSIGN_OR_RETURN(w.norm, common::load_f32(src, names.prefix + "norm.weight", {h}));
  // NOTE: a tied checkpoint has no lm_head.weight (transformers drops it on save); some
  // exporters write it anyway, equal to embed_tokens, so a present one is used either way.
  if (src.contains(names.lm_head) || !c.tie_word_embeddings) {
    constexpr std::string_view kSuffix = ".weight";
    const std::string& head = names.lm_head;
    const std::string base = head.ends_with(kSuffix) ? head.substr(0, head.size() - kSuffix.size()) : head;
    PRISM_ASSIGN_OR_RETURN(w.lm_head, stacked_linear(src, {base}, {vocab}, h, false, precision));
  } else {
    PRISM_ASSIGN_OR_RETURN(w.lm_head, ops::pack_linear(w.embed_tokens, Tensor(), precision));
  }
  return w;
}

// inv_freq of the rotary dims, edited by rope_scaling as transformers' ROPE_INIT_FUNCTIONS
// do, in its f32 arithmetic (scalars rounded to f32, one op at a time).
Tensor scaled_rope_inv_freq(const configs::LlamaConfig& c) {
  Tensor inv_freq = ops::rope_inv_freq(int(c.head_dim), c.rope_theta);  // [D / 2] f32
  float* f = inv_freq.data<float>();
  const int64_t half = inv_freq.size(0);
  const configs::RopeScaling& s = c.rope_scaling;
  const float factor = float(s.factor);
  if (s.type == configs::RopeScalingType::linear) {
    for (int64_t i = 0; i < half; ++i) f[i] = f[i] / factor;
  } else if (s.type == configs::RopeScalingType::llama3) {
    // NOTE: _compute_llama3_parameters: wavelengths shorter than original/high_freq_factor
    // keep their frequency, longer than original/low_freq_factor are divided by factor, and
    // between the two a ramp in original/wavelen blends the two.
    const float old_context = float(s.original_max_position_embeddings);
    const float low = float(s.low_freq_factor);
    const float low_freq_wavelen = float(double(s.original_max_position_embeddings) / s.low_freq_factor);
    const float high_freq_wavelen = float(double(s.original_max_position_embeddings) / s.high_freq_factor);
    const float two_pi = float(2.0 * std::numbers::pi);
    const float ramp = float(s.high_freq_factor - s.low_freq_factor);
    for (int64_t i = 0; i < half; ++i) {
      // NOTE: PyTorch evaluates `scalar / tensor` as reciprocal(tensor) * scalar; so do we.
      const float wavelen = (1.0f / f[i]) * two_pi;
      const float scaled = wavelen > low_freq_wavelen ? f[i] / factor : f[i];
      if (wavelen < high_freq_wavelen || wavelen > low_freq_wavelen) {
        f[i] = scaled;
      } else {
        const float smooth = ((1.0f / wavelen) * old_context - low) / ramp;
        f[i] = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
    }
  }
  return inv_freq;
}

class LlamaDecoder final : public Decoder {
 public:
  LlamaDecoder(configs::LlamaConfig config, LlamaWeights weights)
      : c_(std::move(config)), w_(std::move(weights)),
        rope_(ops::make_rope_table(scaled_rope_inv_freq(c_), c_.max_context())) {}

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
  const int64_t t = x.size(0), hq = c_.num_attention_heads, hkv = c_.num_key_value_heads, d = c_.head_dim;
  const float eps = float(c_.rms_norm_eps);
  const Tensor h = ops::rms_norm(x, L.input_layernorm, eps);
  const Tensor qkv = ops::linear(h, L.self_attn_qkv_proj).view({t, hq + 2 * hkv, d});  // [T, Hq + 2 Hkv, D]
  Tensor q = qkv.slice(1, 0, hq);             // [T, Hq, D] strided views of qkv
  Tensor k = qkv.slice(1, hq, hq + hkv);      // [T, Hkv, D]
  const Tensor v = qkv.slice(1, hq + hkv, hq + 2 * hkv);
  ops::apply_rope(q, batch.positions, rope_, ops::RopeStyle::half);
  ops::apply_rope(k, batch.positions, rope_, ops::RopeStyle::half);
  ops::PagedKv cache{kv.k, kv.v, kv.k_scale, kv.v_scale, batch.block_tables, batch.context_lens};
  ops::store_kv(k, v, batch.slot_mapping, cache);
  const Tensor attn = ops::paged_attention(q, batch.cu_seqlens_q, cache);  // [T, Hq, D]
  ops::add_(x, ops::linear(attn.view({t, hq * d}), L.self_attn_o_proj));
  const Tensor h2 = ops::rms_norm(x, L.post_attention_layernorm, eps);
  const Tensor gate_up = ops::linear(h2, L.mlp_gate_up_proj);  // [T, 2 I]: gate, then up
  const int64_t inter = c_.intermediate_size;
  const Tensor act = ops::swiglu(gate_up.slice(1, 0, inter), gate_up.slice(1, inter, 2 * inter));
  ops::add_(x, ops::linear(act, L.mlp_down_proj));
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
  using common::linear_bytes;
  int64_t bytes = linear_bytes(w_.lm_head);
  for (const LlamaLayer& L : w_.layers)
    bytes += linear_bytes(L.self_attn_qkv_proj) + linear_bytes(L.self_attn_o_proj) +
             linear_bytes(L.mlp_gate_up_proj) + linear_bytes(L.mlp_down_proj);
  return bytes;
}

int64_t LlamaDecoder::resident_weight_bytes() const {
  const int64_t norms = (2 * c_.num_hidden_layers + 1) * c_.hidden_size * int64_t(sizeof(float));
  return weight_bytes() + int64_t(w_.embed_tokens.nbytes()) + norms;
}

// NOTE: 2 x multiply-adds of the matmuls. Per layer and token: q/k/v (H (Hq + 2 Hkv) D),
// o (Hq D H), gate/up/down (3 H I). Attention: new token i (0-based) attends context + i + 1
// keys, q k^T and p v costing Hq D each per key. Norms, RoPE, softmax and SwiGLU are O(T H).
double LlamaDecoder::flops(int64_t tokens, int64_t context) const {
  const double n = double(tokens), h = double(c_.hidden_size), inter = double(c_.intermediate_size);
  const double qd = double(c_.num_attention_heads * c_.head_dim), kvd = double(c_.num_key_value_heads * c_.head_dim);
  const double per_token = h * (qd + 2 * kvd) + qd * h + 3 * h * inter;
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
  Result<std::unique_ptr<Decoder>> model = load_llama(src, config, LlamaWeightNames{}, precision);
  if (!model) return common::in_dir(dir, model.status());
  return model;
}

}  // namespace prism::models

// models/bert/bert.cpp: the BERT-family encoder. Weights loaded by checkpoint name and packed
// once; the forward pass is a straight line of runtime ops over a flat batch. Computes only:
// no pooling, batching or tokenisation here.
#include "models/bert/bert.h"

#include <string>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "models/common/activation.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using formats::WeightSource;

struct LayerNormWeights {
  Tensor weight, bias;  // [hidden] f32
};

// One encoder layer; fields named after the checkpoint's "encoder.layer.{i}.*" tensors.
struct BertLayer {
  // attention.self.{query,key,value}, packed as one [3 * hidden, hidden] linear (rows q, then
  // k, then v) so the three projections are one GEMM.
  ops::LinearWeight attention_self_qkv;
  ops::LinearWeight attention_output_dense;  // [hidden, hidden]
  LayerNormWeights attention_output_LayerNorm;
  ops::LinearWeight intermediate_dense;      // [intermediate, hidden], activation fused
  ops::LinearWeight output_dense;            // [hidden, intermediate]
  LayerNormWeights output_LayerNorm;
};

struct BertWeights {
  Tensor word_embeddings;  // [vocab, hidden] f32
  // [max_position_embeddings, hidden] f32: position_embeddings + token_type_embeddings[0],
  // summed once at load (every token is of type 0), so the forward pass adds one table.
  Tensor position_embeddings;
  LayerNormWeights embeddings_LayerNorm;
  std::vector<BertLayer> layer;
};

// Checkpoint reads under the detected name prefix ("", "bert." or "roberta.").
class CheckpointReader {
 public:
  CheckpointReader(const WeightSource& src, std::string prefix) : src_(src), prefix_(std::move(prefix)) {}

  // f32, shape checked (stored bf16/f16 is widened: exact).
  Result<Tensor> get(const std::string& name, const Dims& shape) const {
    return src_.get(prefix_ + name, shape, DType::f32);
  }

  // "<base>.weight"/".bias", or "<base>.gamma"/".beta" as the original BERT checkpoints
  // (bert-base-uncased among them) name them; transformers renames those at load too.
  Result<LayerNormWeights> layer_norm(const std::string& base, int64_t hidden) const {
    const bool old_names = !src_.contains(prefix_ + base + ".weight") && src_.contains(prefix_ + base + ".gamma");
    LayerNormWeights w;
    PRISM_ASSIGN_OR_RETURN(w.weight, get(base + (old_names ? ".gamma" : ".weight"), {hidden}));
    PRISM_ASSIGN_OR_RETURN(w.bias, get(base + (old_names ? ".beta" : ".bias"), {hidden}));
    return w;
  }

  // nn.Linear "<base>.weight" [out, in] and "<base>.bias" [out], packed at `precision`.
  Result<ops::LinearWeight> linear(const std::string& base, int64_t out, int64_t in, ops::Precision precision) const {
    PRISM_ASSIGN_OR_RETURN(const Tensor weight, get(base + ".weight", {out, in}));
    PRISM_ASSIGN_OR_RETURN(const Tensor bias, get(base + ".bias", {out}));
    return ops::pack_linear(weight, bias, precision);
  }

  // Several [out_i, in] linears stacked along out into one: their outputs side by side.
  Result<ops::LinearWeight> stacked_linear(const std::vector<std::string>& bases, int64_t out, int64_t in,
                                           ops::Precision precision) const {
    const int64_t n = int64_t(bases.size());
    Tensor weight = Tensor::empty({n * out, in}, DType::f32);
    Tensor bias = Tensor::empty({n * out}, DType::f32);
    for (int64_t i = 0; i < n; ++i) {
      PRISM_ASSIGN_OR_RETURN(const Tensor w, get(bases[i] + ".weight", {out, in}));
      PRISM_ASSIGN_OR_RETURN(const Tensor b, get(bases[i] + ".bias", {out}));
      weight.slice(0, i * out, (i + 1) * out).copy_from(w);
      bias.slice(0, i * out, (i + 1) * out).copy_from(b);
    }
    return ops::pack_linear(weight, bias, precision);
  }

 private:
  const WeightSource& src_;
  std::string prefix_;
};

// BertModel / XLMRobertaModel names carry no prefix; *ForMaskedLM (and other head) models
// nest them under "bert." or "roberta.".
Result<std::string> detect_prefix(const WeightSource& src) {
  for (const char* prefix : {"", "bert.", "roberta."})
    if (src.contains(std::string(prefix) + "embeddings.word_embeddings.weight")) return std::string(prefix);
  return not_found(
      "tensor 'embeddings.word_embeddings.weight' not in the checkpoint (nor under a 'bert.' or 'roberta.' "
      "prefix): not a BERT-family model");
}

Result<BertLayer> load_layer(const CheckpointReader& ckpt, const configs::BertConfig& c, int64_t i, ops::Precision precision) {
  const std::string p = "encoder.layer." + std::to_string(i) + ".";
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  BertLayer L;
  PRISM_ASSIGN_OR_RETURN(L.attention_self_qkv,
                         ckpt.stacked_linear({p + "attention.self.query", p + "attention.self.key",
                                              p + "attention.self.value"},
                                             h, h, precision));
  PRISM_ASSIGN_OR_RETURN(L.attention_output_dense, ckpt.linear(p + "attention.output.dense", h, h, precision));
  PRISM_ASSIGN_OR_RETURN(L.attention_output_LayerNorm, ckpt.layer_norm(p + "attention.output.LayerNorm", h));
  PRISM_ASSIGN_OR_RETURN(L.intermediate_dense, ckpt.linear(p + "intermediate.dense", inter, h, precision));
  PRISM_ASSIGN_OR_RETURN(L.output_dense, ckpt.linear(p + "output.dense", h, inter, precision));
  PRISM_ASSIGN_OR_RETURN(L.output_LayerNorm, ckpt.layer_norm(p + "output.LayerNorm", h));
  return L;
}

Result<BertWeights> load_weights(const WeightSource& src, const configs::BertConfig& c, ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const std::string prefix, detect_prefix(src));
  const CheckpointReader ckpt(src, prefix);
  const int64_t h = c.hidden_size;
  BertWeights w;
  PRISM_ASSIGN_OR_RETURN(w.word_embeddings, ckpt.get("embeddings.word_embeddings.weight", {c.vocab_size, h}));
  PRISM_ASSIGN_OR_RETURN(const Tensor position,
                         ckpt.get("embeddings.position_embeddings.weight", {c.max_position_embeddings, h}));
  PRISM_ASSIGN_OR_RETURN(const Tensor token_type,
                         ckpt.get("embeddings.token_type_embeddings.weight", {c.type_vocab_size, h}));
  w.position_embeddings = ops::add(position, token_type.select(0, 0));
  PRISM_ASSIGN_OR_RETURN(w.embeddings_LayerNorm, ckpt.layer_norm("embeddings.LayerNorm", h));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(BertLayer layer, load_layer(ckpt, c, i, precision));
    w.layer.push_back(std::move(layer));
  }
  return w;
}

// NOTE: activations of one encode() live in three arenas of the calling thread, so a steady
// state allocates nothing and memory is two layers' worth, not all layers': `scratch` holds
// one layer's intermediates and is reset per layer; each layer's output goes to hidden[l % 2]
// and survives exactly until the next layer has read it. Only the result is allocated where
// the caller's current arena (or the heap) says. Per thread rather than per encoder, so the
// encoder itself holds nothing but weights and encode() stays const: each thread that runs
// models reuses its own scratch, whichever encoder it runs.
struct ForwardArenas {
  Arena scratch;
  Arena hidden[2];
};

ForwardArenas& forward_arenas() {
  thread_local ForwardArenas arenas;
  return arenas;
}

class BertEncoder final : public Encoder {
 public:
  BertEncoder(configs::BertConfig config, BertWeights weights) : c_(std::move(config)), w_(std::move(weights)) {}

  Tensor encode(const EncoderBatch& batch) const override;
  int64_t hidden_size() const override { return c_.hidden_size; }
  int64_t max_tokens() const override { return c_.max_tokens(); }
  // NOTE: 2 x multiply-adds of the matmuls. Per layer and token: the weight GEMMs q, k, v and
  // attention.output.dense (4 H^2) and intermediate and output.dense (2 H I); per layer and
  // sequence of n tokens: attention's q k^T and p v (n^2 H each). Embedding sums,
  // LayerNorms, softmax and activations are O(n H) and left out:
  //   flops(n) = 2 L ((4 H^2 + 2 H I) n + 2 n^2 H)
  double flops(int64_t length) const override {
    const double n = double(length), h = double(c_.hidden_size), inter = double(c_.intermediate_size);
    return 2.0 * double(c_.num_hidden_layers) * ((4.0 * h * h + 2.0 * h * inter) * n + 2.0 * n * n * h);
  }

 private:
  Tensor embed(const EncoderBatch& batch, Arena* out) const;
  Tensor layer_forward(const BertLayer& L, const Tensor& x, const ops::AttentionSeqs& seqs, Arena* out) const;

  configs::BertConfig c_;
  BertWeights w_;
};

// x = LayerNorm(word[ids] + (position + token_type[0])[pos]), written to `out`: [T, H].
Tensor BertEncoder::embed(const EncoderBatch& batch, Arena* out) const {
  const Tensor& ids = batch.token_ids;
  const Tensor& cu_seqlens = batch.cu_seqlens;
  PRISM_CHECK_MSG(ids.dim() == 1 && ids.dtype() == DType::i32 && ids.is_contiguous(),
                  "encode: token_ids must be [T] i32");
  PRISM_CHECK_MSG(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 1 && cu_seqlens.dtype() == DType::i32 &&
                      cu_seqlens.is_contiguous(),
                  "encode: cu_seqlens must be [S + 1] i32");
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t num_seqs = cu_seqlens.size(0) - 1;
  PRISM_CHECK_MSG(cu[0] == 0 && cu[num_seqs] == ids.size(0), "encode: cu_seqlens must span token_ids from 0");

  // Positions restart at each sequence (padding rows of a slot continue the count).
  Tensor positions = Tensor::empty({ids.size(0)}, DType::i32);  // [T] i32
  int32_t* pos = positions.data<int32_t>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    PRISM_CHECK_MSG(cu[s + 1] >= cu[s] && cu[s + 1] - cu[s] <= c_.max_tokens(),
                    "encode: a sequence is longer than the model's max_tokens()");
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) pos[t] = int32_t(c_.position_offset) + (t - cu[s]);
  }
  Tensor x = ops::embedding(w_.word_embeddings, ids);
  ops::add_(x, ops::embedding(w_.position_embeddings, positions));
  ArenaScope scope(out);
  return ops::layer_norm(x, w_.embeddings_LayerNorm.weight, w_.embeddings_LayerNorm.bias, float(c_.layer_norm_eps));
}

// One post-LN layer; x: [T, H]. Intermediates in the current (scratch) arena, the result in `out`.
Tensor BertEncoder::layer_forward(const BertLayer& L, const Tensor& x, const ops::AttentionSeqs& seqs,
                                  Arena* out) const {
  const int64_t t = x.size(0), heads = c_.num_attention_heads, d = c_.head_dim();
  const float eps = float(c_.layer_norm_eps);
  const Tensor qkv = ops::linear(x, L.attention_self_qkv).view({t, 3, heads, d});  // [T, 3, A, D]
  const Tensor context = ops::attention(qkv.select(1, 0), qkv.select(1, 1), qkv.select(1, 2), seqs,
                                        ops::AttentionParams{.scale = 0.0f, .causal = false});  // [T, A, D]
  Tensor a = ops::linear(context.view({t, c_.hidden_size}), L.attention_output_dense);
  ops::add_(a, x);
  const Tensor h = ops::layer_norm(a, L.attention_output_LayerNorm.weight, L.attention_output_LayerNorm.bias, eps);
  Tensor o = ops::linear(ops::linear(h, L.intermediate_dense, common::op_activation(c_.activation)), L.output_dense);
  ops::add_(o, h);
  ArenaScope scope(out);
  return ops::layer_norm(o, L.output_LayerNorm.weight, L.output_LayerNorm.bias, eps);
}

Tensor BertEncoder::encode(const EncoderBatch& batch) const {
  Arena* const result_arena = current_arena();  // the caller's (null: heap)
  if (batch.token_ids.defined() && batch.token_ids.numel() == 0) return Tensor::empty({0, c_.hidden_size}, DType::f32);
  ForwardArenas& arenas = forward_arenas();
  const ops::AttentionSeqs seqs{batch.cu_seqlens, batch.cu_seqlens, batch.kv_lens};
  const int64_t num_layers = int64_t(w_.layer.size());
  Tensor x;
  {
    arenas.scratch.reset();
    arenas.hidden[0].reset();
    ArenaScope scope(&arenas.scratch);
    x = embed(batch, &arenas.hidden[0]);
  }
  for (int64_t l = 0; l < num_layers; ++l) {
    Arena* out = l + 1 == num_layers ? result_arena : &arenas.hidden[(l + 1) % 2];
    if (out != result_arena) out->reset();  // held layer l - 1's input, read by now
    arenas.scratch.reset();
    ArenaScope scope(&arenas.scratch);
    x = layer_forward(w_.layer[l], x, seqs, out);
  }
  return x;
}

}  // namespace

Result<std::unique_ptr<Encoder>> load_bert(const std::string& dir, ops::Precision precision) {
  ArenaScope no_arena(nullptr);  // weights outlive every forward pass's arena
  PRISM_ASSIGN_OR_RETURN(configs::BertConfig config, configs::BertConfig::load(dir));
  PRISM_ASSIGN_OR_RETURN(const WeightSource src, WeightSource::open(dir));
  Result<BertWeights> weights = load_weights(src, config, precision);
  if (!weights) return Status(weights.status().code(), dir + ": " + weights.status().message());
  return std::unique_ptr<Encoder>(new BertEncoder(std::move(config), std::move(weights).value()));
}

}  // namespace prism::models

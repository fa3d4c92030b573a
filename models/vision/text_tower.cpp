// models/vision/text_tower.cpp: CLIP / SigLIP text transformers. Weights loaded by checkpoint
// name and packed once; encode() is a straight line of runtime ops over the flat batch.
#include "models/vision/text_tower.h"

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/common/transformer_layer.h"
#include "models/common/weight_loading.h"
#include "runtime/arena.h"

namespace prism::models::vision {
namespace {

using configs::HfConfig;
using formats::WeightSource;
using common::ForwardArenas;
using common::LayerNormWeights;
using common::MlpActivation;
using common::TransformerLayer;
using common::TransformerShape;

Result<int64_t> positive_int(const configs::HfConfig& c, const char* key, int64_t fallback) {
  PRISM_ASSIGN_OR_RETURN(const int64_t v, c.get_int(key, fallback));
  if (v <= 0)
    return invalid_argument(std::string("config.json: text_config.") + key + " must be positive, got " +
                            std::to_string(v));
  return v;
}

struct TextWeights {
  Tensor token_embedding;     // [vocab, hidden], the checkpoint's float dtype (bf16 stays bf16)
  Tensor position_embedding;  // [max_position_embeddings, hidden] f32
  std::vector<TransformerLayer> layers;
  LayerNormWeights final_layer_norm;
  // CLIP: text_projection.weight [projection_dim, hidden], no bias; SigLIP: text_model.head (+ bias).
  ops::LinearWeight projection;
};

class TextTower final : public Encoder {
 public:
  TextTower(TextTowerConfig config, TransformerShape shape, TextWeights weights)
      : c_(std::move(config)), shape_(shape), w_(std::move(weights)) {}

  Tensor encode(const EncoderBatch& batch) const override;
  int64_t hidden_size() const override { return c_.projection_size; }
  int64_t max_tokens() const override { return c_.max_position_embeddings; }
  // NOTE: 2 × multiply-adds of the matmuls for one text of n tokens: per layer the q/k/v/out
  // GEMMs (4 H² n), fc1 / fc2 (2 H I n) and attention's q kᵀ and p v (2 n² H; causal CLIP
  // computes the lower triangle, n (n + 1) H); the per-token projection (H E n). Norms,
  // activations and embedding sums are O(n H), left out:
  //   flops(n) = 2 (L ((4 H² + 2 H I) n + A(n)) + H E n),  A = n (n + 1) H (CLIP), 2 n² H (SigLIP)
  double flops(int64_t length) const override {
    const double n = double(length), h = double(c_.hidden_size), inter = double(c_.intermediate_size);
    const double attention = c_.kind == configs::VisionTowerKind::clip ? n * (n + 1.0) * h : 2.0 * n * n * h;
    return 2.0 * (double(c_.num_layers) * ((4.0 * h * h + 2.0 * h * inter) * n + attention) +
                  h * double(c_.projection_size) * n);
  }

 private:
  TextTowerConfig c_;
  TransformerShape shape_;
  TextWeights w_;
};

// ids [T] i32, cu_seqlens [S + 1] → [T, projection_size] f32 in the caller's arena.
Tensor TextTower::encode(const EncoderBatch& batch) const {
  const Tensor& ids = batch.token_ids;
  const Tensor& cu_seqlens = batch.cu_seqlens;
  PRISM_CHECK_MSG(ids.dim() == 1 && ids.dtype() == DType::i32 && ids.is_contiguous(),
                  "encode: token_ids must be [T] i32");
  PRISM_CHECK_MSG(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 1 && cu_seqlens.dtype() == DType::i32 &&
                      cu_seqlens.is_contiguous(),
                  "encode: cu_seqlens must be [S + 1] i32");
  Arena* const result = current_arena();  // the caller's (null: heap)
  const int64_t t = ids.size(0);
  if (t == 0) return Tensor::empty({0, c_.projection_size}, DType::f32);
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t num_seqs = cu_seqlens.size(0) - 1;
  PRISM_CHECK_MSG(cu[0] == 0 && cu[num_seqs] == t, "encode: cu_seqlens must span token_ids from 0");

  ForwardArenas& arenas = common::forward_arenas();
  arenas.scratch.reset();
  arenas.hidden[0].reset();
  Tensor x;
  {
    ArenaScope scope(&arenas.scratch);
    Tensor positions = Tensor::empty({t}, DType::i32);  // [T] i32, restarting at each sequence
    int32_t* pos = positions.data<int32_t>();
    for (int64_t s = 0; s < num_seqs; ++s) {
      PRISM_CHECK_MSG(cu[s + 1] >= cu[s] && cu[s + 1] - cu[s] <= c_.max_position_embeddings,
                      "encode: a sequence is longer than the model's max_tokens()");
      for (int32_t i = cu[s]; i < cu[s + 1]; ++i) pos[i] = i - cu[s];
    }
    const Tensor tokens = ops::embedding(w_.token_embedding, ids);
    const Tensor position_rows = ops::embedding(w_.position_embedding, positions);
    ArenaScope to_hidden(&arenas.hidden[0]);
    x = ops::add(tokens, position_rows);
  }
  const ops::AttentionSeqs seqs{cu_seqlens, cu_seqlens, batch.kv_lens};
  const size_t n = w_.layers.size();
  const Tensor last = common::run_layers(std::span<const TransformerLayer>(w_.layers), shape_, x, seqs,
                                 /*causal=*/c_.kind == configs::VisionTowerKind::clip, &arenas.hidden[n % 2]);
  arenas.scratch.reset();
  ArenaScope scope(&arenas.scratch);
  const Tensor normed = common::layer_norm(last, w_.final_layer_norm, shape_.layer_norm_eps);
  ArenaScope to_result(result);
  return ops::linear(normed, w_.projection);
}

}  // namespace

Result<TextTowerConfig> TextTowerConfig::from_hf(const configs::HfConfig& t, configs::VisionTowerKind kind, int64_t projection_dim) {
  const bool clip = kind == configs::VisionTowerKind::clip;
  TextTowerConfig c;
  c.kind = kind;
  // CLIPTextConfig / SiglipTextConfig defaults.
  PRISM_ASSIGN_OR_RETURN(c.vocab_size, positive_int(t, "vocab_size", clip ? 49408 : 32000));
  PRISM_ASSIGN_OR_RETURN(c.hidden_size, positive_int(t, "hidden_size", clip ? 512 : 768));
  PRISM_ASSIGN_OR_RETURN(c.intermediate_size, positive_int(t, "intermediate_size", clip ? 2048 : 3072));
  PRISM_ASSIGN_OR_RETURN(const int64_t layers, positive_int(t, "num_hidden_layers", 12));
  PRISM_ASSIGN_OR_RETURN(const int64_t heads, positive_int(t, "num_attention_heads", clip ? 8 : 12));
  PRISM_ASSIGN_OR_RETURN(c.max_position_embeddings, positive_int(t, "max_position_embeddings", clip ? 77 : 64));
  PRISM_ASSIGN_OR_RETURN(c.layer_norm_eps, t.get_float("layer_norm_eps", clip ? 1e-5 : 1e-6));
  PRISM_ASSIGN_OR_RETURN(c.hidden_act, t.get_string("hidden_act", clip ? "quick_gelu" : "gelu_pytorch_tanh"));
  c.num_layers = int(layers);
  c.num_heads = int(heads);
  if (clip) c.projection_size = projection_dim;
  else {
    PRISM_ASSIGN_OR_RETURN(c.projection_size, positive_int(t, "projection_size", c.hidden_size));
  }
  if (c.projection_size <= 0)
    return invalid_argument("config.json: projection_dim must be positive, got " + std::to_string(c.projection_size));
  if (!(c.layer_norm_eps > 0)) return invalid_argument("config.json: text_config.layer_norm_eps must be positive");
  PRISM_RETURN_IF_ERROR(MlpActivation::parse(c.hidden_act).status());
  if (c.hidden_size % c.num_heads != 0)
    return invalid_argument("config.json: text_config.hidden_size " + std::to_string(c.hidden_size) +
                            " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
  return c;
}

Result<std::unique_ptr<Encoder>> load_text_tower(const WeightSource& src, const TextTowerConfig& c,
                                                 ops::Precision precision) {
  ArenaScope no_arena(nullptr);  // weights outlive every forward pass's arena
  TransformerShape shape;
  shape.hidden_size = c.hidden_size;
  shape.intermediate_size = c.intermediate_size;
  shape.num_heads = c.num_heads;
  shape.layer_norm_eps = float(c.layer_norm_eps);
  PRISM_ASSIGN_OR_RETURN(shape.activation, MlpActivation::parse(c.hidden_act));
  const int64_t h = c.hidden_size;
  const std::string p = "text_model.";
  TextWeights w;
  PRISM_ASSIGN_OR_RETURN(w.token_embedding,
                         common::load_table(src, p + "embeddings.token_embedding.weight", {c.vocab_size, h}));
  PRISM_ASSIGN_OR_RETURN(w.position_embedding, common::load_f32(src, p + "embeddings.position_embedding.weight",
                                                                 {c.max_position_embeddings, h}));
  for (int i = 0; i < c.num_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(TransformerLayer layer,
                           common::load_transformer_layer(src, p + "encoder.layers." + std::to_string(i) + ".",
                                                          shape, precision));
    w.layers.push_back(std::move(layer));
  }
  PRISM_ASSIGN_OR_RETURN(w.final_layer_norm, common::load_layer_norm(src, p + "final_layer_norm", h));
  if (c.kind == configs::VisionTowerKind::clip) {
    PRISM_ASSIGN_OR_RETURN(w.projection,
                           common::load_linear(src, {"text_projection"}, {c.projection_size}, h, false, precision));
  } else {
    PRISM_ASSIGN_OR_RETURN(w.projection,
                           common::load_linear(src, {p + "head"}, {c.projection_size}, h, true, precision));
  }
  return std::unique_ptr<Encoder>(new TextTower(c, shape, std::move(w)));
}

}  // namespace prism::models::vision

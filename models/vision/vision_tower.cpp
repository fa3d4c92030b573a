// models/vision/vision_tower.cpp: the CLIP / SigLIP ViT. Weights loaded by checkpoint name
// under the caller's prefix and packed once; the forward pass is a straight line of runtime
// ops over all views at once (flat [V * tokens, hidden], attention within each view).
// Computes only: no preprocessing, feature selection or projection here.
#include "models/vision/vision_tower.h"

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/common/transformer_layer.h"
#include "models/common/weight_loading.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using formats::WeightSource;
using common::LayerNormWeights;
using common::TransformerLayer;
using common::TransformerShape;
using common::uniform_cu_seqlens;

// SiglipMultiheadAttentionPoolingHead ("head.*"): a learned probe attends over the view's
// tokens; then layernorm, MLP, residual.
struct PoolingHead {
  Tensor probe_query;                   // [hidden] f32: in_proj's q rows applied to the probe (a constant)
  ops::LinearWeight attention_in_proj_kv;  // in_proj rows [hidden, 3 hidden): k, then v
  ops::LinearWeight attention_out_proj;
  LayerNormWeights layernorm;
  ops::LinearWeight mlp_fc1, mlp_fc2;
};

struct VisionWeights {
  // embeddings.patch_embedding.weight [hidden, C, p, p] as a linear over ops::patchify's rows (+ bias: SigLIP).
  ops::LinearWeight patch_embedding;
  Tensor class_embedding;     // [hidden] f32 (CLIP)
  Tensor position_embedding;  // [num_positions, hidden] f32
  std::optional<LayerNormWeights> pre_layrnorm;    // CLIP
  std::optional<LayerNormWeights> post_layernorm;  // absent only in a truncated tower that lacks it
  std::vector<TransformerLayer> layers;
  std::optional<PoolingHead> head;
};

Result<PoolingHead> load_head(const WeightSource& src, const std::string& p, const TransformerShape& shape,
                              ops::Precision precision) {
  const int64_t h = shape.hidden_size;
  PoolingHead head;
  PRISM_ASSIGN_OR_RETURN(const Tensor probe, common::load_f32(src, p + "probe", {1, 1, h}));
  PRISM_ASSIGN_OR_RETURN(const Tensor in_w, src.get(p + "attention.in_proj_weight", {3 * h, h}, DType::f32));
  PRISM_ASSIGN_OR_RETURN(const Tensor in_b, src.get(p + "attention.in_proj_bias", {3 * h}, DType::f32));
  {
    PRISM_ASSIGN_OR_RETURN(const ops::LinearWeight q,
                           ops::pack_linear(in_w.slice(0, 0, h).contiguous(), in_b.slice(0, 0, h).contiguous(),
                                            ops::Precision::f32));
    head.probe_query = ops::linear(probe.view({1, h}), q).view({h});
  }
  PRISM_ASSIGN_OR_RETURN(head.attention_in_proj_kv, ops::pack_linear(in_w.slice(0, h, 3 * h).contiguous(),
                                                                     in_b.slice(0, h, 3 * h).contiguous(), precision));
  PRISM_ASSIGN_OR_RETURN(head.attention_out_proj,
                         common::load_linear(src, {p + "attention.out_proj"}, {h}, h, true, precision));
  PRISM_ASSIGN_OR_RETURN(head.layernorm, common::load_layer_norm(src, p + "layernorm", h));
  PRISM_ASSIGN_OR_RETURN(head.mlp_fc1,
                         common::load_linear(src, {p + "mlp.fc1"}, {shape.intermediate_size}, h, true, precision));
  PRISM_ASSIGN_OR_RETURN(head.mlp_fc2,
                         common::load_linear(src, {p + "mlp.fc2"}, {h}, shape.intermediate_size, true, precision));
  return head;
}

Result<VisionWeights> load_weights(const WeightSource& src, const std::string& prefix, const configs::VisionTowerConfig& c,
                                   const TransformerShape& shape, int num_layers, ops::Precision precision) {
  const bool clip = c.kind == configs::VisionTowerKind::clip;
  const int64_t h = c.hidden_size, p = c.patch_size;
  const std::string e = prefix + "embeddings.";
  VisionWeights w;
  {
    PRISM_ASSIGN_OR_RETURN(const Tensor conv,
                           src.get(e + "patch_embedding.weight", {h, c.num_channels, p, p}, DType::f32));
    Tensor bias;
    if (!clip) {
      PRISM_ASSIGN_OR_RETURN(bias, src.get(e + "patch_embedding.bias", {h}, DType::f32));
    }
    PRISM_ASSIGN_OR_RETURN(w.patch_embedding,
                           ops::pack_linear(conv.contiguous().view({h, c.num_channels * p * p}), bias, precision));
  }
  if (clip) {
    PRISM_ASSIGN_OR_RETURN(w.class_embedding, common::load_f32(src, e + "class_embedding", {h}));
  }
  PRISM_ASSIGN_OR_RETURN(w.position_embedding,
                         common::load_f32(src, e + "position_embedding.weight", {c.num_positions(), h}));
  if (clip) {
    PRISM_ASSIGN_OR_RETURN(w.pre_layrnorm, common::load_layer_norm(src, prefix + "pre_layrnorm", h));
  }
  for (int i = 0; i < num_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(TransformerLayer layer,
                           common::load_transformer_layer(src, prefix + "encoder.layers." + std::to_string(i) + ".",
                                                          shape, precision));
    w.layers.push_back(std::move(layer));
  }
  // NOTE: a tower cut short (LLaVA reads layer -2) may come without post_layernorm; a full
  // one must have it.
  if (num_layers == c.num_layers || src.contains(prefix + "post_layernorm.weight")) {
      PRISM_ASSIGN_OR_RETURN(w.post_layernorm, common::load_layer_norm(src, prefix + "post_layernorm", h));
  }
  // The attention-pooling head is there when the checkpoint has it (SiglipVisionModel with
  // vision_use_head); Idefics3's tower has none.
  if (!clip && num_layers == c.num_layers && src.contains(prefix + "head.probe")) {
      PRISM_ASSIGN_OR_RETURN(w.head, load_head(src, prefix + "head.", shape, precision));
  }
  return w;
}

}  // namespace

struct VisionTower::Impl {
  configs::VisionTowerConfig config;
  TransformerShape shape;
  VisionWeights w;

  Tensor embed(const Tensor& pixels) const;
};

VisionTower::VisionTower() : impl_(std::make_unique<Impl>()) {}
VisionTower::~VisionTower() = default;

Result<std::unique_ptr<VisionTower>> VisionTower::load(const formats::WeightSource& weights, const std::string& prefix,
                                                       const configs::VisionTowerConfig& config, ops::Precision precision,
                                                       int num_layers_used) {
  ArenaScope no_arena(nullptr);  // weights outlive every forward pass's arena
  if (num_layers_used < 0 || num_layers_used > config.num_layers)
    return invalid_argument("vision tower: " + std::to_string(num_layers_used) + " layers asked of a tower of " +
                            std::to_string(config.num_layers));
  std::unique_ptr<VisionTower> tower(new VisionTower());
  Impl& m = *tower->impl_;
  m.config = config;
  m.shape.hidden_size = config.hidden_size;
  m.shape.intermediate_size = config.intermediate_size;
  m.shape.num_heads = config.num_heads;
  m.shape.layer_norm_eps = float(config.layer_norm_eps);
  PRISM_ASSIGN_OR_RETURN(m.shape.activation, common::MlpActivation::parse(config.hidden_act));
  const int layers = num_layers_used > 0 ? num_layers_used : config.num_layers;
  PRISM_ASSIGN_OR_RETURN(m.w, load_weights(weights, prefix, config, m.shape, layers, precision));
  return tower;
}

// pixels [V, C, S, S] → the encoder's input [V * N, hidden], in the current arena.
// CLIP: pre_layrnorm([class; patches] + positions); SigLIP: patches + positions.
Tensor VisionTower::Impl::embed(const Tensor& pixels) const {
  const configs::VisionTowerConfig& c = config;
  const int64_t v = pixels.size(0), g = c.grid_side(), n = c.num_positions(), h = c.hidden_size;
  Arena* const out = current_arena();
  common::ForwardArenas& arenas = common::forward_arenas();
  ArenaScope scope(&arenas.scratch);
  const Tensor patches = ops::linear(ops::patchify(pixels, c.patch_size), w.patch_embedding).view({v, g * g, h});
  if (c.kind == configs::VisionTowerKind::siglip) {
    ArenaScope to_out(out);
    return ops::add(patches, w.position_embedding).view({v * n, h});
  }
  Tensor x = Tensor::empty({v, n, h}, DType::f32);
  x.slice(1, 1, n).copy_from(patches);
  for (int64_t i = 0; i < v; ++i) x.select(0, i).select(0, 0).copy_from(w.class_embedding);
  ops::add_(x, w.position_embedding);
  ArenaScope to_out(out);
  return common::layer_norm(x.view({v * n, h}), *w.pre_layrnorm, shape.layer_norm_eps);
}

Tensor VisionTower::forward(const Tensor& pixels, int layers, bool post_layernorm) const {
  const Impl& m = *impl_;
  const configs::VisionTowerConfig& c = m.config;
  PRISM_CHECK_MSG(pixels.dtype() == DType::f32 && pixels.dim() == 4 && pixels.is_contiguous() &&
                      pixels.size(1) == c.num_channels && pixels.size(2) == c.image_size &&
                      pixels.size(3) == c.image_size,
                  "vision tower: pixels must be [V, C, image_size, image_size] f32, contiguous");
  PRISM_CHECK_MSG(layers >= 0 && layers <= num_layers_loaded(), "vision tower: more layers asked than loaded");
  PRISM_CHECK_MSG(!post_layernorm || m.w.post_layernorm.has_value(), "vision tower: post_layernorm not loaded");
  const int64_t v = pixels.size(0);
  if (v == 0) return Tensor::empty({0, c.hidden_size}, DType::f32);
  Arena* const result = current_arena();  // the caller's (null: heap)
  common::ForwardArenas& arenas = common::forward_arenas();
  arenas.scratch.reset();
  arenas.hidden[0].reset();
  Tensor x;
  {
    ArenaScope scope(&arenas.hidden[0]);
    x = m.embed(pixels);
  }
  Tensor cu;
  {
    ArenaScope scope(nullptr);  // lives across every layer's arena resets; [V + 1] i32
    cu = uniform_cu_seqlens(v, c.num_positions());
  }
  const ops::AttentionSeqs seqs{cu, cu, Tensor()};
  const std::span<const TransformerLayer> run(m.w.layers.data(), size_t(layers));
  if (!post_layernorm) return common::run_layers(run, m.shape, x, seqs, false, result);
  const Tensor last = common::run_layers(run, m.shape, x, seqs, false, &arenas.hidden[layers % 2]);
  ArenaScope scope(result);
  return common::layer_norm(last, *m.w.post_layernorm, m.shape.layer_norm_eps);
}

Tensor VisionTower::pool(const Tensor& last_hidden) const {
  const Impl& m = *impl_;
  PRISM_CHECK_MSG(m.w.head.has_value(), "vision tower: pool() without a head");
  const PoolingHead& head = *m.w.head;
  const int64_t n = m.config.num_positions(), h = m.config.hidden_size, heads = m.config.num_heads, d = h / heads;
  PRISM_CHECK_MSG(last_hidden.dim() == 2 && last_hidden.size(1) == h && last_hidden.size(0) % n == 0,
                  "vision tower: pool() takes [V * num_positions, hidden]");
  const int64_t v = last_hidden.size(0) / n;
  if (v == 0) return Tensor::empty({0, h}, DType::f32);
  Arena* const result = current_arena();
  common::ForwardArenas& arenas = common::forward_arenas();
  arenas.scratch.reset();
  ArenaScope scope(&arenas.scratch);
  const Tensor kv = ops::linear(last_hidden, head.attention_in_proj_kv).view({v * n, 2, heads, d});
  Tensor q = Tensor::empty({v, h}, DType::f32);
  for (int64_t i = 0; i < v; ++i) q.select(0, i).copy_from(head.probe_query);
  const ops::AttentionSeqs seqs{uniform_cu_seqlens(v, 1), uniform_cu_seqlens(v, n), Tensor()};
  const Tensor context = ops::attention(q.view({v, heads, d}), kv.select(1, 0), kv.select(1, 1), seqs,
                                        ops::AttentionParams{.scale = 0.0f, .causal = false});
  const Tensor o = ops::linear(context.view({v, h}), head.attention_out_proj);
  Tensor mlp = ops::linear(common::layer_norm(o, head.layernorm, m.shape.layer_norm_eps), head.mlp_fc1,
                           m.shape.activation.fused);
  mlp = ops::linear(mlp, head.mlp_fc2);
  ArenaScope to_result(result);
  return ops::add(o, mlp);
}

bool VisionTower::has_head() const { return impl_->w.head.has_value(); }
const configs::VisionTowerConfig& VisionTower::config() const { return impl_->config; }
int VisionTower::num_layers_loaded() const { return int(impl_->w.layers.size()); }

// NOTE: 2 × multiply-adds of the matmuls, for one view of N tokens (P patches): the patch
// GEMM (P · C p² · H), per layer the q/k/v/out GEMMs (4 H² N), fc1 and fc2 (2 H I N) and
// attention's q kᵀ and p v (2 N² H). Norms, activations and embedding sums are O(N H), left out:
//   flops_per_view(L) = 2 (P C p² H + L ((4 H² + 2 H I) N + 2 N² H))
double VisionTower::flops_per_view(int layers) const {
  const configs::VisionTowerConfig& c = impl_->config;
  const double h = double(c.hidden_size), inter = double(c.intermediate_size), n = double(c.num_positions());
  const double patch = double(c.num_patches()) * double(c.num_channels * c.patch_size * c.patch_size) * h;
  return 2.0 * (patch + double(layers) * ((4.0 * h * h + 2.0 * h * inter) * n + 2.0 * n * n * h));
}

}  // namespace prism::models

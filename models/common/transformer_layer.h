// models/common/transformer_layer.h: the pre-LN encoder layer CLIP and SigLIP use in both
// towers ("<prefix>encoder.layers.{i}.*": layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2,
// mlp.fc1 / fc2, every linear with a bias), its activations, and the per-thread arenas a
// layer-by-layer forward pass lives in. Shared by the vision tower, the dual encoders' text
// towers and Whisper's encoder (the same layer under Whisper's names, loaded there); Whisper's
// decoder uses its LayerNorms. Knows nothing of images, audio or tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "formats/safetensors.h"
#include "runtime/arena.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models::common {

struct LayerNormWeights {
  Tensor weight, bias;  // [hidden] f32, owned copies
};

// hidden_act of CLIP / SigLIP configs; every form fuses into fc1's GEMM.
struct MlpActivation {
  ops::Activation fused = ops::Activation::none;
  // "quick_gelu", "gelu" (erf), "gelu_new" / "gelu_pytorch_tanh" (tanh); invalid_argument otherwise.
  static Result<MlpActivation> parse(const std::string& hidden_act);
};

// Sizes a layer is loaded and run with.
struct TransformerShape {
  int64_t hidden_size = 0, intermediate_size = 0;
  int num_heads = 0;
  float layer_norm_eps = 1e-5f;
  MlpActivation activation;
};

// One layer; fields named after the checkpoint's tensors.
struct TransformerLayer {
  LayerNormWeights layer_norm1, layer_norm2;
  // self_attn.{q,k,v}_proj stacked along out: [3 * hidden, hidden], rows q, k, v (one GEMM).
  ops::LinearWeight self_attn_qkv_proj;
  ops::LinearWeight self_attn_out_proj;  // [hidden, hidden]
  ops::LinearWeight mlp_fc1;             // [intermediate, hidden]
  ops::LinearWeight mlp_fc2;             // [hidden, intermediate]
};

// "<base>.weight" and "<base>.bias", [hidden] each.
Result<LayerNormWeights> load_layer_norm(const formats::WeightSource& src, const std::string& base, int64_t hidden);
// prefix: "...encoder.layers.{i}." (with the dot). not_found / invalid_argument naming a tensor.
Result<TransformerLayer> load_transformer_layer(const formats::WeightSource& src, const std::string& prefix,
                                                const TransformerShape& shape, ops::Precision precision);

Tensor layer_norm(const Tensor& x, const LayerNormWeights& w, float eps);

// cu_seqlens [n + 1] i32 of n sequences of `len` tokens each (views of a tower, segments of
// an audio encoder): 0, len, 2 len, ...
Tensor uniform_cu_seqlens(int64_t n, int64_t len);

// x [T, hidden] f32 → x + attn(ln1(x)), then + mlp(ln2(·)): [T, hidden] f32.
// NOTE: attention runs within the sequences of `seqs` only (a view, a text); intermediates
// go to the current arena, the result to `out` (null: the heap).
Tensor transformer_layer_forward(const TransformerLayer& L, const TransformerShape& shape, const Tensor& x,
                                 const ops::AttentionSeqs& seqs, bool causal, Arena* out);

// NOTE: one forward pass's activations live in arenas of the calling thread, so a steady
// state allocates nothing and holds two layers' activations, not all: `scratch` is reset per
// layer; each layer's output goes to hidden[l % 2] and lives until the next layer read it.
// Per thread (not per model) so models stay const and shareable. `staging` holds a result
// one model function hands to the next within a call (the tower's output before pooling).
struct ForwardArenas {
  Arena scratch;
  Arena hidden[2];
  Arena staging;
};
ForwardArenas& forward_arenas();

// Runs layers [0, layers.size()) over x, the embeddings, which must live in
// forward_arenas().hidden[0]; the last output goes to `out` (null: the heap; may be
// hidden[layers.size() % 2] for a caller that normalises it next). Resets scratch and the
// hidden arenas as it goes.
Tensor run_layers(std::span<const TransformerLayer> layers, const TransformerShape& shape, const Tensor& x,
                  const ops::AttentionSeqs& seqs, bool causal, Arena* out);

}  // namespace prism::models::common

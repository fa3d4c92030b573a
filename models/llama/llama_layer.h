// models/llama/llama_layer.h: one Llama-family decoder layer (Llama, Mistral, Qwen2, Qwen3),
// its weights loaded by checkpoint name and its forward pass in two halves around the
// attention kernel, shared by the decoder (llama.cpp: paged KV cache) and the text encoder
// (llama_text_encoder.cpp: attention within the batch, no cache). Which attention runs, the
// KV cache and what becomes of the residual stream are the callers'; nothing here knows of
// either, and neither caller repeats a line of the layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "configs/llama_config.h"
#include "formats/safetensors.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models::llama {

// One decoder layer; fields named after the checkpoint's "<prefix>layers.{i}.*" tensors.
struct LlamaLayer {
  Tensor input_layernorm;           // [hidden] f32
  Tensor post_attention_layernorm;  // [hidden] f32
  // self_attn.{q,k,v}_proj stacked along out: [(Hq + 2 Hkv) * D, hidden], rows q, k, v.
  ops::LinearWeight self_attn_qkv_proj;
  ops::LinearWeight self_attn_o_proj;  // [hidden, Hq * D]
  // Qwen3's per-head RMSNorms (config.qk_norm): [D] f32; undefined for the other families.
  Tensor self_attn_q_norm, self_attn_k_norm;
  // mlp.{gate,up}_proj stacked along out: [2 * intermediate, hidden], rows gate, then up.
  ops::LinearWeight mlp_gate_up_proj;
  ops::LinearWeight mlp_down_proj;  // [hidden, intermediate]
};

// Where the stack's tensors sit: "model." in a *ForCausalLM checkpoint, "" in a base-model
// one (Qwen3Model, LlamaModel: what a diffusion pipeline's text_encoder/ may hold), decided
// by which "<prefix>embed_tokens.weight" exists. not_found naming both when neither does.
Result<std::string> detect_prefix(const formats::WeightSource& src);

// nn.Linears "<bases[i]>.weight" [outs[i], in] (+ biases) stacked into one packed linear, read
// in the checkpoint's float dtype (a bf16 checkpoint is not widened to f32 before packing).
Result<ops::LinearWeight> stacked_linear(const formats::WeightSource& src, const std::vector<std::string>& bases,
                                         const std::vector<int64_t>& outs, int64_t in, bool with_bias,
                                         ops::Precision precision);

// Layer i under prefix ("model." or ""). not_found / invalid_argument naming the tensor.
Result<LlamaLayer> load_layer(const formats::WeightSource& src, const configs::LlamaConfig& c, const std::string& prefix,
                              int64_t i, ops::Precision precision);

// inv_freq of the rotary dims, [D / 2] f32, edited by rope_scaling as transformers'
// ROPE_INIT_FUNCTIONS do (in its f32 arithmetic).
Tensor scaled_rope_inv_freq(const configs::LlamaConfig& c);

// The attention's inputs: q [T, Hq, D], k and v [T, Hkv, D] f32 (last dim contiguous; q, k and v
// may be strided views of one fused projection), q and k normalised per head (Qwen3) and
// rotated at `positions` ([T] i32, each < the rope table's length).
struct AttentionInputs {
  Tensor q, k, v;
};

// First half of a pre-norm layer: RMSNorm, fused q/k/v projection, q/k norms, RoPE. x [T, hidden]
// is only read. Intermediates in the current arena.
AttentionInputs attention_inputs(const LlamaLayer& L, const configs::LlamaConfig& c, const Tensor& x,
                                 const Tensor& positions, const ops::RopeTable& rope);

// Second half: x += o_proj(attn), then x += down(silu(gate(n)) * up(n)) with n = RMSNorm(x). x
// [T, hidden] f32 updated in place; attn [T, Hq, D] f32 contiguous. Intermediates in the
// current arena.
void finish_layer(const LlamaLayer& L, const configs::LlamaConfig& c, Tensor& x, const Tensor& attn);

// Bytes the layer's linears stream in one forward pass (norms left out).
int64_t layer_linear_bytes(const LlamaLayer& L);

// Multiply-adds of the layer's projections for one token: q/k/v (H (Hq + 2 Hkv) D), o (Hq D H),
// gate/up/down (3 H I). Attention's q k^T and p v add Hq D per attended key each.
double layer_macs_per_token(const configs::LlamaConfig& c);

}  // namespace prism::models::llama

// models/llama/llama_layer.cpp: the Llama-family layer's loading and its two forward halves
// (llama_layer.h). A straight line of runtime ops; no attention kernel, cache or result
// arena here.
#include "models/llama/llama_layer.h"

#include <cmath>
#include <numbers>

#include "models/common/weight_loading.h"

namespace prism::models::llama {

using formats::WeightSource;

Result<std::string> detect_prefix(const WeightSource& src) {
  for (const char* prefix : {"model.", ""})
    if (src.contains(std::string(prefix) + "embed_tokens.weight")) return std::string(prefix);
  return not_found("no model.embed_tokens.weight or embed_tokens.weight: not a Llama-family checkpoint");
}

Result<ops::LinearWeight> stacked_linear(const WeightSource& src, const std::vector<std::string>& bases,
                                         const std::vector<int64_t>& outs, int64_t in, bool with_bias,
                                         ops::Precision precision) {
  return common::load_linear(src, bases, outs, in, with_bias, precision,
                             common::stored_float_dtype(src, bases[0] + ".weight"));
}

Result<LlamaLayer> load_layer(const WeightSource& src, const configs::LlamaConfig& c, const std::string& prefix,
                              int64_t i, ops::Precision precision) {
  const std::string p = prefix + "layers." + std::to_string(i) + ".";
  const int64_t h = c.hidden_size, inter = c.intermediate_size, d = c.head_dim;
  const int64_t q_out = c.num_attention_heads * d, kv_out = c.num_key_value_heads * d;
  LlamaLayer L;
  PRISM_ASSIGN_OR_RETURN(L.input_layernorm, common::load_f32(src, p + "input_layernorm.weight", {h}));
  PRISM_ASSIGN_OR_RETURN(L.post_attention_layernorm, common::load_f32(src, p + "post_attention_layernorm.weight", {h}));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_qkv_proj,
                         stacked_linear(src, {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"},
                                        {q_out, kv_out, kv_out}, h, c.q_k_v_bias, precision));
  PRISM_ASSIGN_OR_RETURN(L.self_attn_o_proj,
                         stacked_linear(src, {p + "self_attn.o_proj"}, {h}, q_out, c.o_bias, precision));
  if (c.qk_norm) {
    PRISM_ASSIGN_OR_RETURN(L.self_attn_q_norm, common::load_f32(src, p + "self_attn.q_norm.weight", {d}));
    PRISM_ASSIGN_OR_RETURN(L.self_attn_k_norm, common::load_f32(src, p + "self_attn.k_norm.weight", {d}));
  }
  PRISM_ASSIGN_OR_RETURN(L.mlp_gate_up_proj, stacked_linear(src, {p + "mlp.gate_proj", p + "mlp.up_proj"},
                                                            {inter, inter}, h, c.mlp_bias, precision));
  PRISM_ASSIGN_OR_RETURN(L.mlp_down_proj,
                         stacked_linear(src, {p + "mlp.down_proj"}, {h}, inter, c.mlp_bias, precision));
  return L;
}

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

AttentionInputs attention_inputs(const LlamaLayer& L, const configs::LlamaConfig& c, const Tensor& x,
                                 const Tensor& positions, const ops::RopeTable& rope) {
  const int64_t t = x.size(0), hq = c.num_attention_heads, hkv = c.num_key_value_heads, d = c.head_dim;
  const float eps = float(c.rms_norm_eps);
  const Tensor h = ops::rms_norm(x, L.input_layernorm, eps);
  const Tensor qkv = ops::linear(h, L.self_attn_qkv_proj).view({t, hq + 2 * hkv, d});  // [T, Hq + 2 Hkv, D]
  AttentionInputs a{qkv.slice(1, 0, hq), qkv.slice(1, hq, hq + hkv), qkv.slice(1, hq + hkv, hq + 2 * hkv)};
  if (c.qk_norm) {
    // NOTE: Qwen3 normalises each head's D values (one [D] weight shared by the heads) before
    // RoPE, one call per tensor over all its heads. rms_norm gathers the strided rows of the
    // fused projection into q and k of their own and normalises them, which RoPE then rotates
    // in place: (Hq + 2 Hkv) D values touched a few times a token against the layer's ~H (Hq D
    // + 3 I) multiply-adds (1e-4 of them at Qwen3-4B's sizes; no difference measurable in a
    // layer's time), so a fused norm + RoPE op would not pay for itself.
    a.q = ops::rms_norm(a.q, L.self_attn_q_norm, eps);  // [T, Hq, D]
    a.k = ops::rms_norm(a.k, L.self_attn_k_norm, eps);  // [T, Hkv, D]
  }
  ops::apply_rope(a.q, positions, rope, ops::RopeStyle::half);
  ops::apply_rope(a.k, positions, rope, ops::RopeStyle::half);
  return a;
}

void finish_layer(const LlamaLayer& L, const configs::LlamaConfig& c, Tensor& x, const Tensor& attn) {
  const int64_t t = x.size(0), inter = c.intermediate_size;
  ops::add_(x, ops::linear(attn.view({t, c.num_attention_heads * c.head_dim}), L.self_attn_o_proj));
  const Tensor h = ops::rms_norm(x, L.post_attention_layernorm, float(c.rms_norm_eps));
  const Tensor gate_up = ops::linear(h, L.mlp_gate_up_proj);  // [T, 2 I]: gate, then up
  const Tensor act = ops::swiglu(gate_up.slice(1, 0, inter), gate_up.slice(1, inter, 2 * inter));
  ops::add_(x, ops::linear(act, L.mlp_down_proj));
}

int64_t layer_linear_bytes(const LlamaLayer& L) {
  using common::linear_bytes;
  return linear_bytes(L.self_attn_qkv_proj) + linear_bytes(L.self_attn_o_proj) + linear_bytes(L.mlp_gate_up_proj) +
         linear_bytes(L.mlp_down_proj);
}

double layer_macs_per_token(const configs::LlamaConfig& c) {
  const double h = double(c.hidden_size), inter = double(c.intermediate_size);
  const double qd = double(c.num_attention_heads * c.head_dim), kvd = double(c.num_key_value_heads * c.head_dim);
  return h * (qd + 2 * kvd) + qd * h + 3 * h * inter;
}

}  // namespace prism::models::llama

// models/z_image/z_image.cpp: the Z-Image diffusion transformer. Weights loaded by their
// diffusers names and packed once (to_q/to_k/to_v fused into one linear, w1/w3 into
// another); the pass is a straight line of runtime ops over a flat batch of rows
// (cu_seqlens), each row its own caption length and latent size. Computes only: no step
// loop, sampling or guidance here.
//
// NOTE: the sequence layout. Per row, image tokens (patches in (f, h, w) order, padded to a
// multiple of 32 with x_pad_token) then caption tokens (padded to a multiple of 32 with
// cap_pad_token); rows back to back. Pad tokens are real tokens of their row: they attend
// and are attended (diffusers' masks cover the padded lengths), so each row is one
// non-causal attention sequence and nothing else is padded. Positions (three RoPE axes):
// caption token i at (1 + i, 0, 0); image token (f, h, w) at (cap_padded + 1 + f, h, w);
// image pad tokens at (0, 0, 0).
//
// Fusions (models::ZImageKernels; each switch off gives the same floats): the adaLN scale is
// folded into the RMSNorm weight (rms_norm(x, w) * (1 + s) = rms_norm(x, w * (1 + s))) and the
// tanh gate into the post-norm weight, all rows' weights one [B, dim] tensor run by the
// row-segmented ops::rms_norm_segments and the one-pass gated residual ops::add_rms_norm_;
// QK-norm and RoPE are one in-place pass (ops::rms_norm_rope_) on the packed QKV output; a
// plan per shape (ZImagePlan) is built once. Left: the final negation (velocity = -output)
// could be folded into the final linear at load; SwiGLU already reads the packed w1|w3 halves
// in place (one pass), a GEMM epilogue for it would need a w2 input in bf16.
#include "models/z_image/z_image.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "models/common/scratch_arena.h"
#include "models/common/weight_loading.h"
#include "runtime/arena.h"

namespace prism::models {

using configs::ZImageConfig;
using formats::WeightSource;

// One ZImageTransformerBlock; fields named after "<stack>.{i}.*".
struct ZImageBlock {
  Tensor attention_norm1, attention_norm2, ffn_norm1, ffn_norm2;  // [dim] f32
  Tensor attention_norm_q, attention_norm_k;  // [head_dim] f32; undefined without qk_norm
  // attention.to_q / to_k / to_v stacked along out: [3 dim, dim], rows q, k, v (no bias).
  ops::LinearWeight attention_to_qkv;
  ops::LinearWeight attention_to_out;  // attention.to_out.0: [dim, dim], no bias
  // feed_forward.w1 / w3 stacked along out: [2 I, dim], rows w1 (gate), then w3 (up).
  ops::LinearWeight feed_forward_w13;
  ops::LinearWeight feed_forward_w2;  // [dim, I]
  // adaLN_modulation.0: [4 dim, min(dim, 256)] + bias, rows scale_msa, gate_msa, scale_mlp,
  // gate_mlp. Undefined in the context refiner (no modulation).
  ops::LinearWeight adaLN_modulation;
  // The attention's arithmetic: bf16 with bf16 and int8 linears (their error already
  // dwarfs bf16 rounding of Q, K, V and P), f32 with f32 ones (f32 parity stays exact).
  ops::AttentionPrecision attention_precision = ops::AttentionPrecision::f32;
};

struct ZImageWeights {
  ops::LinearWeight x_embedder;       // all_x_embedder.2-1: [dim, 4 C] + bias
  ops::LinearWeight t_embedder_mlp0;  // t_embedder.mlp.0: [1024, 256] + bias, f32
  ops::LinearWeight t_embedder_mlp2;  // t_embedder.mlp.2: [min(dim, 256), 1024] + bias, f32
  Tensor cap_embedder_norm;           // cap_embedder.0.weight: [cap_feat_dim] f32
  ops::LinearWeight cap_embedder_linear;  // cap_embedder.1: [dim, cap_feat_dim] + bias, f32
  Tensor x_pad_token, cap_pad_token;  // [1, dim] f32
  std::vector<ZImageBlock> noise_refiner, context_refiner, layers;
  ops::LinearWeight final_adaLN_modulation;  // all_final_layer.2-1.adaLN_modulation.1: [dim, min(dim, 256)] + bias
  ops::LinearWeight final_linear;            // all_final_layer.2-1.linear: [4 C, dim] + bias
  // Per RoPE axis: cos, sin of the float32 angles pos * freq, [axes_lens[a], axes_dims[a] / 2] f32.
  std::vector<Tensor> rope_cos, rope_sin;
};

namespace {

constexpr float kQkNormEps = 1e-5f;     // diffusers' Attention(qk_norm="rms_norm", eps=1e-5)
constexpr float kFinalNormEps = 1e-6f;  // FinalLayer.norm_final
constexpr int64_t kVaeScaleFactor = 8;  // Z-Image's AutoencoderKL: 2^(4 blocks - 1)

// ---- loading -----------------------------------------------------------------------------

Result<ops::LinearWeight> stacked_linear(const WeightSource& src, const std::vector<std::string>& bases,
                                         const std::vector<int64_t>& outs, int64_t in, bool with_bias,
                                         ops::Precision precision) {
  return common::load_linear(src, bases, outs, in, with_bias, precision,
                             common::stored_float_dtype(src, bases[0] + ".weight"));
}

Result<ZImageBlock> load_block(const WeightSource& src, const ZImageConfig& c, const std::string& p, bool modulation,
                               ops::Precision precision) {
  const int64_t d = c.dim, inter = c.ffn_hidden();
  ZImageBlock L;
  L.attention_precision = precision == ops::Precision::f32 ? ops::AttentionPrecision::f32 : ops::AttentionPrecision::bf16;
  PRISM_ASSIGN_OR_RETURN(L.attention_norm1, common::load_f32(src, p + "attention_norm1.weight", {d}));
  PRISM_ASSIGN_OR_RETURN(L.attention_norm2, common::load_f32(src, p + "attention_norm2.weight", {d}));
  PRISM_ASSIGN_OR_RETURN(L.ffn_norm1, common::load_f32(src, p + "ffn_norm1.weight", {d}));
  PRISM_ASSIGN_OR_RETURN(L.ffn_norm2, common::load_f32(src, p + "ffn_norm2.weight", {d}));
  if (c.qk_norm) {
    PRISM_ASSIGN_OR_RETURN(L.attention_norm_q, common::load_f32(src, p + "attention.norm_q.weight", {c.head_dim()}));
    PRISM_ASSIGN_OR_RETURN(L.attention_norm_k, common::load_f32(src, p + "attention.norm_k.weight", {c.head_dim()}));
  }
  PRISM_ASSIGN_OR_RETURN(L.attention_to_qkv,
                         stacked_linear(src, {p + "attention.to_q", p + "attention.to_k", p + "attention.to_v"},
                                        {d, d, d}, d, false, precision));
  PRISM_ASSIGN_OR_RETURN(L.attention_to_out, stacked_linear(src, {p + "attention.to_out.0"}, {d}, d, false, precision));
  PRISM_ASSIGN_OR_RETURN(L.feed_forward_w13, stacked_linear(src, {p + "feed_forward.w1", p + "feed_forward.w3"},
                                                            {inter, inter}, d, false, precision));
  PRISM_ASSIGN_OR_RETURN(L.feed_forward_w2, stacked_linear(src, {p + "feed_forward.w2"}, {d}, inter, false, precision));
  if (modulation) {
    PRISM_ASSIGN_OR_RETURN(L.adaLN_modulation,
                           stacked_linear(src, {p + "adaLN_modulation.0"}, {4 * d}, c.adaln_dim(), true, precision));
  }
  return L;
}

// NOTE: like diffusers' RopeEmbedder: freq_i = 1 / theta^(2i / d) in float64, the angle
// pos * freq_i rounded to float32 (its .float()), then its cos and sin (here in float64,
// rounded once).
void make_rope_tables(const ZImageConfig& c, ZImageWeights& w) {
  for (size_t a = 0; a < 3; ++a) {
    const int64_t d = c.axes_dims[a], half = d / 2, len = c.axes_lens[a];
    Tensor cos = Tensor::empty({len, half}, DType::f32), sin = Tensor::empty({len, half}, DType::f32);
    float* pc = cos.data<float>();
    float* ps = sin.data<float>();
    for (int64_t i = 0; i < half; ++i) {
      const double freq = 1.0 / std::pow(c.rope_theta, double(2 * i) / double(d));
      for (int64_t pos = 0; pos < len; ++pos) {
        const double angle = double(float(double(pos) * freq));
        pc[pos * half + i] = float(std::cos(angle));
        ps[pos * half + i] = float(std::sin(angle));
      }
    }
    w.rope_cos.push_back(cos);
    w.rope_sin.push_back(sin);
  }
}

Result<std::unique_ptr<ZImageWeights>> load_weights(const WeightSource& src, const ZImageConfig& c,
                                                    ops::Precision precision) {
  const int64_t d = c.dim, a = c.adaln_dim(), patch = c.patch_features();
  const std::string key = c.patch_key();
  constexpr ops::Precision f32 = ops::Precision::f32;
  auto w = std::make_unique<ZImageWeights>();
  PRISM_ASSIGN_OR_RETURN(w->x_embedder, stacked_linear(src, {"all_x_embedder." + key}, {d}, patch, true, precision));
  PRISM_ASSIGN_OR_RETURN(w->t_embedder_mlp0,
                         stacked_linear(src, {"t_embedder.mlp.0"}, {ZImageConfig::kTimestepMlpHidden},
                                        ZImageConfig::kTimestepFrequencies, true, f32));
  PRISM_ASSIGN_OR_RETURN(w->t_embedder_mlp2, stacked_linear(src, {"t_embedder.mlp.2"}, {a},
                                                            ZImageConfig::kTimestepMlpHidden, true, f32));
  PRISM_ASSIGN_OR_RETURN(w->cap_embedder_norm, common::load_f32(src, "cap_embedder.0.weight", {c.cap_feat_dim}));
  PRISM_ASSIGN_OR_RETURN(w->cap_embedder_linear,
                         stacked_linear(src, {"cap_embedder.1"}, {d}, c.cap_feat_dim, true, f32));
  PRISM_ASSIGN_OR_RETURN(w->x_pad_token, common::load_f32(src, "x_pad_token", {1, d}));
  PRISM_ASSIGN_OR_RETURN(w->cap_pad_token, common::load_f32(src, "cap_pad_token", {1, d}));
  for (int64_t i = 0; i < c.n_refiner_layers; ++i) {
    const std::string n = std::to_string(i);
    PRISM_ASSIGN_OR_RETURN(ZImageBlock noise, load_block(src, c, "noise_refiner." + n + ".", true, precision));
    w->noise_refiner.push_back(std::move(noise));
    PRISM_ASSIGN_OR_RETURN(ZImageBlock context, load_block(src, c, "context_refiner." + n + ".", false, precision));
    w->context_refiner.push_back(std::move(context));
  }
  for (int64_t i = 0; i < c.n_layers; ++i) {
    PRISM_ASSIGN_OR_RETURN(ZImageBlock layer, load_block(src, c, "layers." + std::to_string(i) + ".", true, precision));
    w->layers.push_back(std::move(layer));
  }
  const std::string final_layer = "all_final_layer." + key;
  PRISM_ASSIGN_OR_RETURN(w->final_adaLN_modulation,
                         stacked_linear(src, {final_layer + ".adaLN_modulation.1"}, {d}, a, true, precision));
  PRISM_ASSIGN_OR_RETURN(w->final_linear, stacked_linear(src, {final_layer + ".linear"}, {patch}, d, true, precision));
  make_rope_tables(c, *w);
  return w;
}

// ---- the pass ----------------------------------------------------------------------------

// Rows of one flat sequence: row b is tokens [starts[b], starts[b + 1]).
struct Segments {
  Tensor cu_seqlens;            // [B + 1] i32
  std::vector<int64_t> starts;  // the same, on the host
  int64_t num_rows() const { return int64_t(starts.size()) - 1; }
  int64_t total() const { return starts.back(); }
};

Segments make_segments(const std::vector<int64_t>& lengths) {
  Segments s;
  s.starts.push_back(0);
  for (int64_t n : lengths) s.starts.push_back(s.starts.back() + n);
  std::vector<int32_t> cu(s.starts.begin(), s.starts.end());
  s.cu_seqlens = Tensor::from<int32_t>(cu, {int64_t(cu.size())});
  return s;
}

// The per-row norm weights of one modulated block: weight * (1 + scale) before attention and
// FFN, weight * tanh(gate) after them (the scales and gates folded into the RMSNorms).
// (The unfused path's form, kept for ZImageKernels::segmented_norms = false.)
struct RowModulation {
  std::vector<Tensor> attention_norm1, attention_norm2, ffn_norm1, ffn_norm2;  // per row [dim]
};

// tanh of a gate [dim] (a copy). NOTE: a host loop, not ops::tanh: that op is declared in
// runtime/ops.h for the autoencoders but implemented on another branch; a gate is one [dim]
// vector per row and block, so this costs nothing measurable. Switch when ops::tanh lands.
Tensor gate_tanh(const Tensor& gate) {
  Tensor out = gate.contiguous().clone();
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = std::tanh(p[i]);
  return out;
}

RowModulation row_modulation(const ZImageBlock& L, const Tensor& t_emb, int64_t dim) {
  const Tensor mod = ops::linear(t_emb, L.adaLN_modulation);  // [B, 4 dim]: scale_msa, gate_msa, scale_mlp, gate_mlp
  const Tensor one = Tensor::from<float>({1.0f}, {1});
  RowModulation m;
  for (int64_t b = 0; b < mod.size(0); ++b) {
    const Tensor row = mod.select(0, b);  // [4 dim]
    m.attention_norm1.push_back(ops::mul(L.attention_norm1, ops::add(row.slice(0, 0, dim), one)));
    m.attention_norm2.push_back(ops::mul(L.attention_norm2, gate_tanh(row.slice(0, dim, 2 * dim))));
    m.ffn_norm1.push_back(ops::mul(L.ffn_norm1, ops::add(row.slice(0, 2 * dim, 3 * dim), one)));
    m.ffn_norm2.push_back(ops::mul(L.ffn_norm2, gate_tanh(row.slice(0, 3 * dim, 4 * dim))));
  }
  return m;
}

// The four norms' weights of one block: [4, B, dim] (attention_norm1, attention_norm2,
// ffn_norm1, ffn_norm2; row b of each scaled by row b's modulation), or the block's own
// [dim] weights for the context refiner (no modulation, one weight for all rows).
// NOTE: the products round as row_modulation's ops do (w * (s + 1), w * tanh(g)), so both
// paths see the same weights.
struct NormWeights {
  Tensor attention_norm1, attention_norm2, ffn_norm1, ffn_norm2;  // [B, dim] or [dim]
};

NormWeights norm_weights(const ZImageBlock& L, const Tensor& t_emb, int64_t dim) {
  if (!L.adaLN_modulation.defined()) return {L.attention_norm1, L.attention_norm2, L.ffn_norm1, L.ffn_norm2};
  const Tensor mod = ops::linear(t_emb, L.adaLN_modulation);  // [B, 4 dim]: scale_msa, gate_msa, scale_mlp, gate_mlp
  const int64_t rows = mod.size(0);
  Tensor w = Tensor::empty({4, rows, dim}, DType::f32);  // [4, B, dim]
  const float* base[4] = {L.attention_norm1.data<float>(), L.attention_norm2.data<float>(), L.ffn_norm1.data<float>(),
                          L.ffn_norm2.data<float>()};
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t b = 0; b < rows; ++b) {
      const float* m = mod.data<float>() + b * 4 * dim + k * dim;
      float* out = w.data<float>() + (k * rows + b) * dim;
      const bool gate = k % 2 == 1;  // gate_msa, gate_mlp
      for (int64_t i = 0; i < dim; ++i) out[i] = base[k][i] * (gate ? std::tanh(m[i]) : m[i] + 1.0f);
    }
  return {w.select(0, 0), w.select(0, 1), w.select(0, 2), w.select(0, 3)};
}

// rms_norm of each row's tokens with that row's weight, into one [T, dim] tensor.
Tensor rms_norm_rows(const Tensor& x, const std::vector<Tensor>& weights, const Segments& seg, float eps) {
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  for (int64_t b = 0; b < seg.num_rows(); ++b) {
    const int64_t s = seg.starts[b], e = seg.starts[b + 1];
    out.slice(0, s, e).copy_from(ops::rms_norm(x.slice(0, s, e), weights[b], eps));
  }
  return out;
}

// x += rms_norm(y, weight_b) row by row (the gated residual of a modulated block).
void add_rms_norm_rows(Tensor& x, const Tensor& y, const std::vector<Tensor>& weights, const Segments& seg,
                       float eps) {
  for (int64_t b = 0; b < seg.num_rows(); ++b) {
    const int64_t s = seg.starts[b], e = seg.starts[b + 1];
    Tensor xb = x.slice(0, s, e);
    ops::add_(xb, ops::rms_norm(y.slice(0, s, e), weights[b], eps));
  }
}

// The attention of a block on normed input h [T, dim]; returns to_out's output [T, dim].
Tensor block_attention(const ZImageBlock& L, const ZImageConfig& c, const ZImageKernels& kernels, const Tensor& h,
                       const Segments& seg, const Tensor& positions, const ops::RopeTable& rope) {
  const int64_t t = h.size(0), heads = c.n_heads, hd = c.head_dim();
  const Tensor qkv = ops::linear(h, L.attention_to_qkv).view({t, 3 * heads, hd});  // [T, 3 H, D]
  Tensor q = qkv.slice(1, 0, heads);  // [T, H, D] strided views of qkv
  Tensor k = qkv.slice(1, heads, 2 * heads);
  const Tensor v = qkv.slice(1, 2 * heads, 3 * heads);
  if (c.qk_norm && kernels.qk_norm_rope) {
    ops::rms_norm_rope_(q, L.attention_norm_q, kQkNormEps, positions, rope, ops::RopeStyle::interleaved);  // in qkv
    ops::rms_norm_rope_(k, L.attention_norm_k, kQkNormEps, positions, rope, ops::RopeStyle::interleaved);
  } else {
    if (c.qk_norm) {
      q = ops::rms_norm(q, L.attention_norm_q, kQkNormEps);  // [T, H, D] over each head
      k = ops::rms_norm(k, L.attention_norm_k, kQkNormEps);
    }
    ops::apply_rope(q, positions, rope, ops::RopeStyle::interleaved);  // complex pairs (2i, 2i + 1)
    ops::apply_rope(k, positions, rope, ops::RopeStyle::interleaved);
  }
  const ops::AttentionPrecision precision = kernels.bf16_attention ? L.attention_precision : ops::AttentionPrecision::f32;
  const Tensor a = ops::attention(q, k, v, {seg.cu_seqlens, seg.cu_seqlens, Tensor()},
                                  {.causal = false, .precision = precision});  // [T, H, D]
  return ops::linear(a.view({t, heads * hd}), L.attention_to_out);  // [T, dim]
}

Tensor block_feed_forward(const ZImageBlock& L, int64_t inter, const Tensor& h) {
  const Tensor w13 = ops::linear(h, L.feed_forward_w13);  // [T, 2 I]: w1, then w3
  return ops::linear(ops::swiglu(w13.slice(1, 0, inter), w13.slice(1, inter, 2 * inter)), L.feed_forward_w2);  // [T, dim]
}

// The same block on the unfused path (ZImageKernels::segmented_norms off).
void block_forward_per_row(const ZImageBlock& L, const ZImageConfig& c, const ZImageKernels& kernels, Tensor& x,
                           const Segments& seg, const Tensor& positions, const ops::RopeTable& rope,
                           const Tensor& t_emb) {
  const float eps = float(c.norm_eps);
  if (!L.adaLN_modulation.defined()) {
    const Tensor a = block_attention(L, c, kernels, ops::rms_norm(x, L.attention_norm1, eps), seg, positions, rope);
    ops::add_(x, ops::rms_norm(a, L.attention_norm2, eps));
    const Tensor f = block_feed_forward(L, c.ffn_hidden(), ops::rms_norm(x, L.ffn_norm1, eps));
    ops::add_(x, ops::rms_norm(f, L.ffn_norm2, eps));
    return;
  }
  const RowModulation m = row_modulation(L, t_emb, c.dim);
  const Tensor a = block_attention(L, c, kernels, rms_norm_rows(x, m.attention_norm1, seg, eps), seg, positions, rope);
  add_rms_norm_rows(x, a, m.attention_norm2, seg, eps);
  const Tensor f = block_feed_forward(L, c.ffn_hidden(), rms_norm_rows(x, m.ffn_norm1, seg, eps));
  add_rms_norm_rows(x, f, m.ffn_norm2, seg, eps);
}

// One ZImageTransformerBlock on x [T, dim] in place. t_emb [B, adaln] for modulated blocks,
// undefined for the context refiner's. positions index rope's rows.
void block_forward(const ZImageBlock& L, const ZImageConfig& c, const ZImageKernels& kernels, Tensor& x,
                   const Segments& seg, const Tensor& positions, const ops::RopeTable& rope, const Tensor& t_emb) {
  if (!kernels.segmented_norms) return block_forward_per_row(L, c, kernels, x, seg, positions, rope, t_emb);
  const float eps = float(c.norm_eps);
  const Tensor& cu = seg.cu_seqlens;
  const NormWeights w = norm_weights(L, t_emb, c.dim);  // each [B, dim] (modulated) or [dim]
  const Tensor a = block_attention(L, c, kernels, ops::rms_norm_segments(x, w.attention_norm1, cu, eps), seg, positions,
                                   rope);  // [T, dim]
  ops::add_rms_norm_(x, a, w.attention_norm2, cu, eps);  // x += tanh(gate_msa) * attention_norm2(a)
  const Tensor f = block_feed_forward(L, c.ffn_hidden(), ops::rms_norm_segments(x, w.ffn_norm1, cu, eps));  // [T, dim]
  ops::add_rms_norm_(x, f, w.ffn_norm2, cu, eps);  // x += tanh(gate_mlp) * ffn_norm2(f)
}

// A stack of blocks over x, intermediates in the scratch arena reset per block.
void run_stack(const std::vector<ZImageBlock>& blocks, int64_t first, int64_t last, const ZImageConfig& c,
               const ZImageKernels& kernels, Tensor& x, const Segments& seg, const Tensor& positions,
               const ops::RopeTable& rope, const Tensor& t_emb) {
  Arena& scratch = common::scratch_arena();
  for (int64_t l = first; l < last; ++l) {
    scratch.reset();
    ArenaScope scope(&scratch);
    block_forward(blocks[l], c, kernels, x, seg, positions, rope, t_emb);
  }
  scratch.reset();
}

// t_embedder's input: [B, 256] f32, cos then sin of t * t_scale * freq_i,
// freq_i = exp(-ln(10000) i / 128). NOTE: the products are float32, as upstream's (a float32
// t times the float t_scale, times float32 freqs); arguments reach ~1000, where a different
// rounding would move cos by ~1e-4.
Tensor timestep_frequencies(const std::vector<float>& t, double t_scale) {
  constexpr int64_t half = ZImageConfig::kTimestepFrequencies / 2;
  const int64_t b = int64_t(t.size());
  Tensor out = Tensor::empty({b, 2 * half}, DType::f32);
  float* p = out.data<float>();
  for (int64_t i = 0; i < half; ++i) {
    const float freq = float(std::exp(-std::log(10000.0) * double(i) / double(half)));
    for (int64_t r = 0; r < b; ++r) {
      const float arg = (t[r] * float(t_scale)) * freq;
      p[r * 2 * half + i] = float(std::cos(double(arg)));
      p[r * 2 * half + half + i] = float(std::sin(double(arg)));
    }
  }
  return out;
}

// x [C, F, H, W] -> [F * H/2 * W/2, 4 C]: "c f h ph w pw -> (f h w) (ph pw c)" (f_patch 1).
Tensor patchify(const Tensor& x) {
  const int64_t ch = x.size(0), f = x.size(1), h = x.size(2) / 2, w = x.size(3) / 2;
  return x.contiguous().view({ch, f, h, 2, w, 2}).permute({1, 2, 4, 3, 5, 0}).contiguous().view({f * h * w, 4 * ch});
}

// The inverse: tokens [F * H/2 * W/2, 4 C] -> [C, F, H, W].
Tensor unpatchify(const Tensor& tokens, int64_t ch, int64_t f, int64_t h, int64_t w) {
  return tokens.view({f, h / 2, w / 2, 2, 2, ch}).permute({5, 0, 1, 3, 2, 4}).contiguous().view({ch, f, h, w});
}

// Rows [r, r + n) of dst set to the [1, dim] token.
void fill_rows(Tensor& dst, int64_t r, int64_t n, const Tensor& token) {
  for (int64_t i = 0; i < n; ++i) dst.slice(0, r + i, r + i + 1).copy_from(token);
}

void check_rows(const ZImageConfig& c, const std::vector<ZImageRow>& rows) {
  PRISM_CHECK_MSG(!rows.empty(), "z-image: begin needs at least one row");
  for (const ZImageRow& row : rows) {
    const Tensor& x = row.x;
    PRISM_CHECK_MSG(x.dim() == 4 && x.size(0) == c.in_channels && x.dtype() == DType::f32 && x.size(1) >= 1 &&
                        x.size(2) >= 2 && x.size(3) >= 2 && x.size(2) % 2 == 0 && x.size(3) % 2 == 0,
                    "z-image: a latent must be [in_channels, F, H, W] f32 with even H, W");
    PRISM_CHECK_MSG(row.cap_feats.dim() == 2 && row.cap_feats.size(0) >= 1 &&
                        row.cap_feats.size(1) == c.cap_feat_dim && row.cap_feats.dtype() == DType::f32,
                    "z-image: cap_feats must be [L >= 1, cap_feat_dim] f32");
  }
}

// The rows' token counts and places in the unified sequence (rows checked by check_rows).
std::vector<ZImageState::Row> plan_rows(const std::vector<ZImageRow>& rows) {
  std::vector<ZImageState::Row> plan;
  int64_t start = 0;
  for (const ZImageRow& row : rows) {
    const Tensor& x = row.x;
    ZImageState::Row r;
    r.frames = x.size(1);
    r.height = x.size(2);
    r.width = x.size(3);
    r.image_tokens = r.frames * (r.height / 2) * (r.width / 2);
    r.image_padded = ZImageConfig::padded(r.image_tokens);
    r.cap_padded = ZImageConfig::padded(row.cap_feats.size(0));
    r.start = start;
    start += r.image_padded + r.cap_padded;
    plan.push_back(r);
  }
  return plan;
}

// x_img [N_img, dim] (each row's padded image tokens): all_x_embedder of the patches, then
// x_pad_token in the pad rows. Intermediates in the current (scratch) arena.
void embed_image_tokens(const ZImageConfig& c, const ZImageWeights& w, const std::vector<ZImageRow>& rows,
                        const std::vector<ZImageState::Row>& plan, const Segments& seg, Tensor& x_img) {
  int64_t real = 0;
  for (const ZImageState::Row& r : plan) real += r.image_tokens;
  Tensor patches = Tensor::empty({real, c.patch_features()}, DType::f32);  // [N_real, 4 C]
  int64_t off = 0;
  for (size_t b = 0; b < rows.size(); ++b) {
    patches.slice(0, off, off + plan[b].image_tokens).copy_from(patchify(rows[b].x));
    off += plan[b].image_tokens;
  }
  const Tensor embedded = ops::linear(patches, w.x_embedder);  // [N_real, dim]
  off = 0;
  for (size_t b = 0; b < rows.size(); ++b) {
    const ZImageState::Row& r = plan[b];
    const int64_t s = seg.starts[b];
    x_img.slice(0, s, s + r.image_tokens).copy_from(embedded.slice(0, off, off + r.image_tokens));
    fill_rows(x_img, s + r.image_tokens, r.image_padded - r.image_tokens, w.x_pad_token);
    off += r.image_tokens;
  }
}

// cap [N_cap, dim] (each row's padded caption tokens): cap_embedder (RMSNorm, linear) of the
// features, then cap_pad_token in the pad rows. Intermediates in the current (scratch) arena.
void embed_caption_tokens(const ZImageConfig& c, const ZImageWeights& w, const std::vector<ZImageRow>& rows,
                          const std::vector<ZImageState::Row>& plan, const Segments& seg, Tensor& cap) {
  int64_t real = 0;
  for (const ZImageRow& row : rows) real += row.cap_feats.size(0);
  Tensor feats = Tensor::empty({real, c.cap_feat_dim}, DType::f32);  // [N_cap_real, cap_feat_dim]
  int64_t off = 0;
  for (const ZImageRow& row : rows) {
    feats.slice(0, off, off + row.cap_feats.size(0)).copy_from(row.cap_feats);
    off += row.cap_feats.size(0);
  }
  const Tensor embedded = ops::linear(ops::rms_norm(feats, w.cap_embedder_norm, float(c.norm_eps)),
                                      w.cap_embedder_linear);  // [N_cap_real, dim]
  off = 0;
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t n = rows[b].cap_feats.size(0), s = seg.starts[b];
    cap.slice(0, s, s + n).copy_from(embedded.slice(0, off, off + n));
    fill_rows(cap, s + n, plan[b].cap_padded - n, w.cap_pad_token);
    off += n;
  }
}

}  // namespace

// NOTE: the static plan. Everything a pass derives from its rows' shapes alone (latent F, H,
// W and caption length per row): the rows' places, the three sequences' cu_seqlens, every
// token's position and rotation row, the refiners' token indices. A denoising loop runs the
// same shapes every step, so it is built once per shape (on the heap) and shared, immutable,
// by every pass of that shape.
struct ZImagePlan {
  std::vector<ZImageState::Row> rows;
  Segments unified, image, caption;  // the unified sequence, the noise and the context refiner's
  Tensor positions;                  // [T] i32: 0..T-1, each token's row of rope
  Tensor image_positions, caption_positions;  // [N_img], [N_cap] i32: the refiners' tokens' rows of rope
  ops::RopeTable rope;               // cos, sin [T, head_dim / 2]
};

// The plans of the last few shapes (a server alternates a handful of resolutions), keyed by
// (F, H, W, caption length) per row.
struct ZImagePlanCache {
  static constexpr size_t kShapes = 4;
  std::mutex mu;
  std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<const ZImagePlan>>> plans;  // most recent last
};

namespace {

// The positions of every token of the unified sequence and their rotation table.
void layout_positions(const ZImageConfig& c, const ZImageWeights& w, ZImagePlan& plan) {
  const int64_t total = plan.unified.total(), half = c.head_dim() / 2;
  Tensor cos = Tensor::empty({total, half}, DType::f32), sin = Tensor::empty({total, half}, DType::f32);
  Tensor positions = Tensor::empty({total}, DType::i32);
  int32_t* pp = positions.data<int32_t>();
  for (int64_t i = 0; i < total; ++i) pp[i] = int32_t(i);
  // One token's row: axis a's table row ids[a], side by side.
  auto set = [&](int64_t token, const int64_t (&ids)[3]) {
    int64_t off = 0;
    for (int a = 0; a < 3; ++a) {
      const int64_t n = c.axes_dims[a] / 2;
      PRISM_CHECK_MSG(ids[a] >= 0 && ids[a] < c.axes_lens[a], "z-image: a position past axes_lens (caption or latent too large)");
      for (int64_t i = 0; i < n; ++i) {
        cos.data<float>()[token * half + off + i] = w.rope_cos[a].data<float>()[ids[a] * n + i];
        sin.data<float>()[token * half + off + i] = w.rope_sin[a].data<float>()[ids[a] * n + i];
      }
      off += n;
    }
  };
  for (const ZImageState::Row& r : plan.rows) {
    const int64_t ht = r.height / 2, wt = r.width / 2;
    for (int64_t i = 0; i < r.image_padded; ++i) {
      if (i < r.image_tokens) set(r.start + i, {r.cap_padded + 1 + i / (ht * wt), (i / wt) % ht, i % wt});
      else set(r.start + i, {0, 0, 0});
    }
    for (int64_t i = 0; i < r.cap_padded; ++i) set(r.start + r.image_padded + i, {1 + i, 0, 0});
  }
  plan.positions = positions;
  plan.rope = {cos, sin, int(c.head_dim())};
}

// Token indices (into the unified sequence) of each row's image or caption part, back to back.
Tensor part_positions(const std::vector<ZImageState::Row>& rows, bool image) {
  std::vector<int32_t> idx;
  for (const ZImageState::Row& r : rows) {
    const int64_t from = image ? r.start : r.start + r.image_padded;
    const int64_t n = image ? r.image_padded : r.cap_padded;
    for (int64_t i = 0; i < n; ++i) idx.push_back(int32_t(from + i));
  }
  return Tensor::from<int32_t>(idx, {int64_t(idx.size())});
}

// The plan of these rows' shapes, on the heap.
std::shared_ptr<const ZImagePlan> make_plan(const ZImageConfig& c, const ZImageWeights& w,
                                            const std::vector<ZImageRow>& rows) {
  ArenaScope heap(nullptr);  // the plan outlives every arena reset
  auto plan = std::make_shared<ZImagePlan>();
  plan->rows = plan_rows(rows);
  std::vector<int64_t> unified_lens, image_lens, cap_lens;
  for (const ZImageState::Row& r : plan->rows) {
    unified_lens.push_back(r.image_padded + r.cap_padded);
    image_lens.push_back(r.image_padded);
    cap_lens.push_back(r.cap_padded);
  }
  plan->unified = make_segments(unified_lens);
  plan->image = make_segments(image_lens);
  plan->caption = make_segments(cap_lens);
  layout_positions(c, w, *plan);
  plan->image_positions = part_positions(plan->rows, true);
  plan->caption_positions = part_positions(plan->rows, false);
  return plan;
}

// What the plan is keyed by: (F, H, W, caption length) per row.
std::vector<int64_t> plan_key(const std::vector<ZImageRow>& rows) {
  std::vector<int64_t> key;
  for (const ZImageRow& row : rows) {
    const Dims& s = row.x.shape();
    key.insert(key.end(), {s.size() > 1 ? s[1] : 0, s.size() > 2 ? s[2] : 0, s.size() > 3 ? s[3] : 0,
                           row.cap_feats.dim() > 0 ? row.cap_feats.size(0) : 0});
  }
  return key;
}

// The per-thread arena the refiners' streams live in during begin() (static plan): reset at
// every begin(), one allocation of the same size for the same shape, so it grows only once.
Arena& stream_arena() {
  thread_local Arena arena;
  return arena;
}

}  // namespace

// ---- ZImageTransformer ---------------------------------------------------------------------

ZImageTransformer::ZImageTransformer(ZImageConfig config, std::unique_ptr<ZImageWeights> weights)
    : c_(std::move(config)), w_(std::move(weights)), plans_(std::make_unique<ZImagePlanCache>()) {}

ZImageTransformer::~ZImageTransformer() = default;

std::shared_ptr<const ZImagePlan> ZImageTransformer::plan_for(const std::vector<ZImageRow>& rows) const {
  if (!kernels_.static_plan) return make_plan(c_, *w_, rows);
  const std::vector<int64_t> key = plan_key(rows);
  std::lock_guard<std::mutex> lock(plans_->mu);
  auto& plans = plans_->plans;
  for (size_t i = 0; i < plans.size(); ++i)
    if (plans[i].first == key) {
      std::rotate(plans.begin() + int64_t(i), plans.begin() + int64_t(i) + 1, plans.end());  // now the most recent
      return plans.back().second;
    }
  if (plans.size() == ZImagePlanCache::kShapes) plans.erase(plans.begin());
  plans.emplace_back(key, make_plan(c_, *w_, rows));
  return plans.back().second;
}

std::unique_ptr<ZImageState> ZImageTransformer::begin(const std::vector<ZImageRow>& rows) const {
  check_rows(c_, rows);
  Arena* const result_arena = current_arena();  // the caller's (null: heap): the state lives there
  auto st = std::make_unique<ZImageState>();
  st->plan = plan_for(rows);
  const ZImagePlan& plan = *st->plan;
  st->rows = plan.rows;
  st->cu_seqlens = plan.unified.cu_seqlens;
  st->positions = plan.positions;
  st->rope = plan.rope;
  for (const ZImageState::Row& r : plan.rows) st->latent_shapes.push_back({c_.in_channels, r.frames, r.height, r.width});
  Arena& scratch = common::scratch_arena();
  scratch.reset();
  {
    ArenaScope scope(&scratch);
    std::vector<float> t;
    for (const ZImageRow& row : rows) t.push_back(row.t);
    const Tensor h = ops::linear(timestep_frequencies(t, c_.t_scale), w_->t_embedder_mlp0, ops::Activation::silu);  // [B, 1024]
    ArenaScope result(result_arena);
    st->t_emb = ops::linear(h, w_->t_embedder_mlp2);  // [B, adaln]
  }
  const Segments &image_seg = plan.image, &cap_seg = plan.caption;
  Tensor x_img, cap;
  if (kernels_.static_plan) {
    // One buffer for both streams: the arena's one block is the same size every step.
    Arena& streams = stream_arena();
    streams.reset();
    ArenaScope scope(&streams);
    const Tensor both = Tensor::empty({image_seg.total() + cap_seg.total(), c_.dim}, DType::f32);
    x_img = both.slice(0, 0, image_seg.total());                            // [N_img, dim]
    cap = both.slice(0, image_seg.total(), image_seg.total() + cap_seg.total());  // [N_cap, dim]
  } else {
    ArenaScope heap(nullptr);  // the refiners' streams outlive the per-block scratch resets
    x_img = Tensor::empty({image_seg.total(), c_.dim}, DType::f32);  // [N_img, dim]
    cap = Tensor::empty({cap_seg.total(), c_.dim}, DType::f32);      // [N_cap, dim]
  }
  {
    ArenaScope scope(&scratch);
    embed_image_tokens(c_, *w_, rows, st->rows, image_seg, x_img);
    embed_caption_tokens(c_, *w_, rows, st->rows, cap_seg, cap);
  }
  const int64_t refiners = c_.n_refiner_layers;
  run_stack(w_->noise_refiner, 0, refiners, c_, kernels_, x_img, image_seg, plan.image_positions, st->rope, st->t_emb);
  run_stack(w_->context_refiner, 0, refiners, c_, kernels_, cap, cap_seg, plan.caption_positions, st->rope, Tensor());
  st->hidden = Tensor::empty({plan.unified.total(), c_.dim}, DType::f32);  // [T, dim]: per row image, then caption
  for (size_t b = 0; b < rows.size(); ++b) {
    const ZImageState::Row& r = st->rows[b];
    st->hidden.slice(0, r.start, r.start + r.image_padded)
        .copy_from(x_img.slice(0, image_seg.starts[b], image_seg.starts[b + 1]));
    st->hidden.slice(0, r.start + r.image_padded, r.start + r.image_padded + r.cap_padded)
        .copy_from(cap.slice(0, cap_seg.starts[b], cap_seg.starts[b + 1]));
  }
  return st;
}

void ZImageTransformer::run_layers(ZImageState& st, int first, int last) const {
  PRISM_CHECK_MSG(0 <= first && first <= last && last <= c_.n_layers, "z-image: run_layers range outside [0, n_layers]");
  PRISM_CHECK_MSG(st.plan != nullptr, "z-image: a state not made by begin()");
  const Segments& seg = st.plan->unified;
  PRISM_CHECK_MSG(st.hidden.dim() == 2 && st.hidden.size(0) == seg.total() && st.hidden.size(1) == c_.dim &&
                      st.hidden.is_contiguous(), "z-image: state.hidden must stay [T, dim] contiguous");
  run_stack(w_->layers, first, last, c_, kernels_, st.hidden, seg, st.positions, st.rope, st.t_emb);
}

std::vector<Tensor> ZImageTransformer::end(ZImageState& st) const {
  Arena* const result_arena = current_arena();
  const int64_t d = c_.dim, ch = c_.in_channels;
  Arena& scratch = common::scratch_arena();
  scratch.reset();
  Tensor out;
  {
    ArenaScope scope(&scratch);
    const Tensor mod = ops::linear(ops::silu(st.t_emb), w_->final_adaLN_modulation);  // [B, dim]
    const Tensor one = Tensor::from<float>({1.0f}, {1});
    int64_t real = 0;
    for (const ZImageState::Row& r : st.rows) real += r.image_tokens;
    // LayerNorm without affine, times (1 + scale): the scale is the norm's weight.
    Tensor normed = Tensor::empty({real, d}, DType::f32);  // [N_real, dim]: image tokens only
    int64_t off = 0;
    for (size_t b = 0; b < st.rows.size(); ++b) {
      const ZImageState::Row& r = st.rows[b];
      const Tensor scale = ops::add(mod.select(0, int64_t(b)), one);  // [dim]
      normed.slice(0, off, off + r.image_tokens)
          .copy_from(ops::layer_norm(st.hidden.slice(0, r.start, r.start + r.image_tokens), scale, Tensor(), kFinalNormEps));
      off += r.image_tokens;
    }
    out = ops::linear(normed, w_->final_linear);  // [N_real, 4 C]
  }
  ArenaScope scope(result_arena);
  std::vector<Tensor> results;
  int64_t off = 0;
  for (const ZImageState::Row& r : st.rows) {
    results.push_back(unpatchify(out.slice(0, off, off + r.image_tokens), ch, r.frames, r.height, r.width));  // [C, F, H, W]
    off += r.image_tokens;
  }
  scratch.reset();
  return results;
}

std::vector<Tensor> ZImageTransformer::forward(const std::vector<ZImageRow>& rows) const {
  std::unique_ptr<ZImageState> st = begin(rows);
  run_layers(*st, 0, int(c_.n_layers));
  return end(*st);
}

// NOTE: 2 x multiply-adds of the matmuls. Per block and token: to_q/k/v and to_out (4 dim^2),
// w1/w3/w2 (3 dim I); attention over n tokens: q k^T and p v, n^2 dim each. The noise
// refiner sees the padded image tokens, the context refiner the padded caption tokens, the
// layers both. Embedders and the final linear run on the real tokens; norms, RoPE, softmax
// and the per-row adaLN projections are O(T dim) or O(B).
double z_image_flops(const ZImageConfig& c, int64_t image_tokens, int64_t cap_tokens) {
  const double d = double(c.dim), inter = double(c.ffn_hidden());
  const double ni = double(ZImageConfig::padded(image_tokens)), nc = double(ZImageConfig::padded(cap_tokens));
  const double per_token = 4 * d * d + 3 * d * inter;
  auto stack = [&](double n, double blocks) { return blocks * (n * per_token + 2 * n * n * d); };
  const double r = double(c.n_refiner_layers);
  const double macs = stack(ni, r) + stack(nc, r) + stack(ni + nc, double(c.n_layers)) +
                      double(image_tokens) * double(c.patch_features()) * d * 2 +
                      double(cap_tokens) * double(c.cap_feat_dim) * d;
  return 2.0 * macs;
}

int64_t ZImageTransformer::weight_bytes() const {
  using common::linear_bytes;
  int64_t bytes = linear_bytes(w_->x_embedder) + linear_bytes(w_->t_embedder_mlp0) + linear_bytes(w_->t_embedder_mlp2) +
                  linear_bytes(w_->cap_embedder_linear) + linear_bytes(w_->final_adaLN_modulation) +
                  linear_bytes(w_->final_linear);
  for (const auto* stack : {&w_->noise_refiner, &w_->context_refiner, &w_->layers})
    for (const ZImageBlock& L : *stack) {
      bytes += linear_bytes(L.attention_to_qkv) + linear_bytes(L.attention_to_out) + linear_bytes(L.feed_forward_w13) +
               linear_bytes(L.feed_forward_w2);
      if (L.adaLN_modulation.defined()) bytes += linear_bytes(L.adaLN_modulation);
    }
  return bytes;
}

// ---- the Denoiser --------------------------------------------------------------------------

namespace {

class ZImageDenoiser final : public Denoiser {
 public:
  explicit ZImageDenoiser(std::unique_ptr<ZImageTransformer> t) : t_(std::move(t)) {}

  // NOTE: the conventions. Z-Image's time runs the other way (t = 1 - sigma: the pipeline
  // feeds (1000 - timestep) / 1000) and the network predicts data - noise, the negative of
  // the sampler's velocity d(latent)/d(sigma); the pipeline negates it before the step.
  std::unique_ptr<DenoiseState> begin(const DenoiseBatch& batch) const override {
    PRISM_CHECK_MSG(batch.latents.size() == batch.sigmas.size() && batch.latents.size() == batch.conditioning.size(),
                    "z-image: one sigma and one conditioning per latent");
    std::vector<ZImageRow> rows;
    for (size_t i = 0; i < batch.latents.size(); ++i) {
      const Tensor& lat = batch.latents[i];
      PRISM_CHECK_MSG(lat.dim() == 3 || lat.dim() == 4, "z-image: a latent is [C, H, W] or [C, F, H, W]");
      const Tensor x = lat.dim() == 3 ? lat.contiguous().view({lat.size(0), 1, lat.size(1), lat.size(2)}) : lat;
      rows.push_back({x, 1.0f - batch.sigmas[i], batch.conditioning[i]});
    }
    std::unique_ptr<ZImageState> st = t_->begin(rows);
    for (size_t i = 0; i < batch.latents.size(); ++i) st->latent_shapes[i] = batch.latents[i].shape();
    return st;
  }

  void run_blocks(DenoiseState& state, int first, int last) const override {
    t_->run_layers(own(state), first, last);
  }

  std::vector<Tensor> end(DenoiseState& state) const override {
    ZImageState& st = own(state);
    std::vector<Tensor> out = t_->end(st);
    const Tensor minus_one = Tensor::from<float>({-1.0f}, {1});
    for (size_t i = 0; i < out.size(); ++i) out[i] = ops::mul(out[i], minus_one).view(st.latent_shapes[i]);
    return out;
  }

  int num_blocks() const override { return int(t_->config().n_layers); }
  int64_t hidden_size() const override { return t_->config().dim; }
  int64_t latent_channels() const override { return t_->config().in_channels; }
  int64_t size_multiple() const override { return kVaeScaleFactor * ZImageConfig::kPatchSize; }
  double flops(int64_t image_tokens, int64_t cond_tokens) const override { return t_->flops(image_tokens, cond_tokens); }

 private:
  static ZImageState& own(DenoiseState& state) {
    auto* st = dynamic_cast<ZImageState*>(&state);
    PRISM_CHECK_MSG(st != nullptr, "z-image: a state from another denoiser");
    return *st;
  }

  std::unique_ptr<ZImageTransformer> t_;
};

namespace fs = std::filesystem;

// The transformer folder of dir: dir/transformer when dir is a pipeline (model_index.json).
Result<std::string> transformer_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / "model_index.json", ec)) {
    if (!fs::exists(fs::path(dir) / "config.json", ec))
      return not_found(dir + ": neither a Z-Image model directory (model_index.json) nor a transformer folder "
                             "(config.json)");
    return dir;
  }
  const std::string index = (fs::path(dir) / "model_index.json").string();
  PRISM_ASSIGN_OR_RETURN(const configs::HfConfig hf, configs::HfConfig::load(index));
  if (!hf.has("transformer")) return not_found(index + ": no 'transformer' entry");
  PRISM_ASSIGN_OR_RETURN(const std::vector<std::string> entry, hf.get_strings("transformer"));
  if (entry.size() == 2 && entry[1] != "ZImageTransformer2DModel")
    return unimplemented(index + ": transformer is '" + entry[1] + "', not ZImageTransformer2DModel");
  return (fs::path(dir) / "transformer").string();
}


}  // namespace

Result<std::unique_ptr<ZImageTransformer>> load_z_image_transformer(const std::string& dir, ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const std::string folder, transformer_dir(dir));
  Result<configs::ZImageConfig> config = configs::ZImageConfig::load(folder);
  if (!config) return common::in_dir(folder, config.status());
  Result<WeightSource> src = WeightSource::open(folder);
  if (!src) return src.status();
  ArenaScope no_arena(nullptr);  // weights and RoPE tables outlive every pass's arena
  Result<std::unique_ptr<ZImageWeights>> weights = load_weights(*src, *config, precision);
  if (!weights) return common::in_dir(folder, weights.status());
  return std::make_unique<ZImageTransformer>(std::move(*config), std::move(*weights));
}

std::unique_ptr<Denoiser> make_z_image_denoiser(std::unique_ptr<ZImageTransformer> transformer) {
  return std::make_unique<ZImageDenoiser>(std::move(transformer));
}

Result<std::unique_ptr<Denoiser>> load_z_image(const std::string& dir, ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<ZImageTransformer> t, load_z_image_transformer(dir, precision));
  return make_z_image_denoiser(std::move(t));
}

}  // namespace prism::models

// runtime/ops.h: the models' only vocabulary. Free functions named by what they compute.
// Each dispatches on device and dtype; today the only backend is runtime/cpu/ (oneDNN for
// GEMM and convolution, hand-written AVX-512/OpenMP kernels for the rest).
//
// Conventions:
// - Activations are f32 unless stated. Outputs are new tensors from the current Arena (if
//   any), contiguous. Inputs may be strided only where stated.
// - Shapes are checked with PRISM_CHECK: a wrong shape here is a bug in a model, not a user
//   error. Load-time work that can fail on user data (packing weights) returns Result.
// - Ops never allocate in a loop, never start threads of their own (OpenMP only) and keep
//   no state except caches of oneDNN primitives keyed by shape.
#pragma once

#include <memory>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::ops {

// ---------------------------------------------------------------------------------------
// Linear layers. Weights are packed once, at load, into the layout of the path that runs
// them on the active instruction-set tier (oneDNN matmul, or Prism's own kernels where oneDNN
// has none or a slow one; linear_path says which); `linear` then runs without allocating.

enum class Precision : uint8_t {
  f32,   // f32 weights and activations
  bf16,  // bf16 weights; activations rounded to bf16 (native bf16 tiers) or kept f32 (the
         // others: weights widened to f32 in the kernel); f32 accumulate and output
  int8,  // s8 weights with per-output-channel scales; activations quantised per token
         // (row) with a dynamic symmetric scale; s32 accumulate; f32 output
};
std::string_view precision_name(Precision p);
Result<Precision> parse_precision(std::string_view name);  // "f32" | "bf16" | "int8"

// Applied to x @ W^T + b in the GEMM's epilogue (no extra pass over the output).
enum class Activation : uint8_t {
  none,
  gelu_erf,    // x * Phi(x) (ops::gelu, GeluForm::erf)
  gelu_tanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GeluForm::tanh)
  silu,        // x * sigmoid(x) (ops::silu)
  relu,        // max(x, 0)
  quick_gelu,  // x * sigmoid(1.702 x) (ops::quick_gelu: CLIP's MLP)
};

class PackedLinear;  // backend-specific; defined in runtime/cpu/

struct LinearWeight {
  std::shared_ptr<const PackedLinear> packed;
  int64_t in_features = 0;
  int64_t out_features = 0;
  Precision precision = Precision::f32;
  bool has_bias = false;
  bool defined() const { return packed != nullptr; }
};

// weight: [out, in] f32, bf16 or f16 (the checkpoint's nn.Linear layout); bias: [out] or an
// undefined Tensor. The source tensors are not referenced after packing.
Result<LinearWeight> pack_linear(const Tensor& weight, const Tensor& bias, Precision precision);

// x: [..., in] f32, rows contiguous. Returns act(x @ W^T + b): [..., out] f32.
Tensor linear(const Tensor& x, const LinearWeight& w, Activation act = Activation::none);

// Which path linear takes for a precision on the active tier, for `prism info`, e.g.
// "oneDNN brgemm (avx512_core_bf16) + dpbf16 decode kernel".
std::string linear_path(Precision p);

// ---------------------------------------------------------------------------------------
// Batched matmul (oneDNN). a: [..., M, K]; b: [..., K, N], or [..., N, K] with
// transpose_b. Leading (batch) dims broadcast numpy-style. f32 in, f32 out; any strides
// whose last dim is contiguous.
struct MatmulOptions {
  bool transpose_b = false;
  float alpha = 1.0f;  // out = alpha * a @ b
};
Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options = {});

// ---------------------------------------------------------------------------------------
// Normalisation and activations, over the last dim; x: [..., H] f32 with contiguous rows.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);  // weight, bias: [H] (bias may be undefined)
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);                        // weight: [H]
// Row-segmented RMSNorm (a batch of rows, each its own weight: an adaLN scale folded in).
// x, y: [T, H] f32, rows contiguous; weights [B, H] f32 with cu_seqlens [B + 1] i32 (rows
// [cu[b], cu[b + 1]) take weights[b]), or [H] for all rows (cu_seqlens may be undefined).
// The same floats as rms_norm of each segment with its weight.
Tensor rms_norm_segments(const Tensor& x, const Tensor& weights, const Tensor& cu_seqlens, float eps);
// In place, one pass: x += rms_norm(y, weights of the row's segment) (the gated residual of an
// adaLN block, its gate folded into the weight). The same floats as add_(x, rms_norm(y, w)).
void add_rms_norm_(Tensor& x, const Tensor& y, const Tensor& weights, const Tensor& cu_seqlens, float eps);
Tensor softmax(const Tensor& x);
enum class GeluForm : uint8_t { erf, tanh };
Tensor gelu(const Tensor& x, GeluForm form = GeluForm::erf);
Tensor silu(const Tensor& x);
Tensor quick_gelu(const Tensor& x);  // x * sigmoid(1.702 x): CLIP's activation (transformers' QuickGELU)
Tensor swiglu(const Tensor& gate, const Tensor& up);  // silu(gate) * up, same shapes
Tensor relu(const Tensor& x);  // max(x, 0), any shape
Tensor tanh(const Tensor& x);  // any shape

// Elementwise with numpy broadcasting; f32.
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
void add_(Tensor& a, const Tensor& b);  // in place: a += b (b broadcasts to a); the residual add

// table: [vocab, H] f32, bf16 or f16; ids: [...] i32 or i64, each in [0, vocab).
// Returns [..., H] f32.
Tensor embedding(const Tensor& table, const Tensor& ids);

// x: [N, D] f32, contiguous; rows: [R] i32 or i64, each in [0, N). Returns x[rows]: [R, D]
// f32 (a decoder's rows that need logits, picked out of its residual stream).
Tensor gather_rows(const Tensor& x, const Tensor& rows);

// ---------------------------------------------------------------------------------------
// Rotary position embeddings.
enum class RopeStyle : uint8_t {
  half,         // Llama / NeoX: rotate the first and second halves of the rotary dims
  interleaved,  // GPT-J: rotate (even, odd) pairs
};
struct RopeTable {
  Tensor cos, sin;  // [max_positions, rotary_dim / 2] f32
  int rotary_dim = 0;
};
// inv_freq[i] = theta^(-2i / rotary_dim), i < rotary_dim / 2 (model-specific scaling, e.g.
// Llama 3's, edits this tensor before make_rope_table).
Tensor rope_inv_freq(int rotary_dim, double theta);
RopeTable make_rope_table(const Tensor& inv_freq, int64_t max_positions);
// x: [T, num_heads, head_dim] f32, last dim contiguous (a strided view of a fused QKV is
// fine); positions: [T] i32. Rotates the first rotary_dim of each head in place.
void apply_rope(Tensor& x, const Tensor& positions, const RopeTable& table, RopeStyle style);
// QK-norm and rotation in one pass, in place: each head of x ([T, H, D] f32, last dim
// contiguous; a strided view of a fused QKV is fine) RMS-normalised over D with weight [D] f32,
// then its first rotary_dim rotated as apply_rope does. The same floats as
// x = rms_norm(x, weight, eps) followed by apply_rope on every tier, without the copy and the
// second pass.
void rms_norm_rope_(Tensor& x, const Tensor& weight, float eps, const Tensor& positions, const RopeTable& table,
                    RopeStyle style);

// ---------------------------------------------------------------------------------------
// Attention: tiled, online-softmax (flash-style) kernels for prefill and decode.
// NOTE: sequences are flat: every tensor's first dim is tokens of all sequences back to
// back, delimited by cu_seqlens ([num_seqs + 1] i32, starting at 0). Query token i of a
// sequence with q_len queries and k_len keys sits at position k_len - q_len + i, so causal
// masking is right for prefill, chunked prefill and decode alike.
// Grouped-query heads: num_q_heads is a multiple of num_kv_heads. Head dims that are multiples
// of 8 up to 128 take the tiled vector path on every tier (32 for MiniLM, 64, 72 for SigLIP,
// 80, 96, 128); others a scalar one, correct but slow.
// The arithmetic of ops::attention (not of paged_attention).
//   f32: everything f32 (the tiled kernel).
//   bf16: Q, K, V rounded to bf16 (nearest even); scores and softmax in f32; the softmax
//     numerators P = exp(s - max) rounded to bf16 for P V; f32 accumulate, normalised by the
//     f32 sum; f32 output. Taken only where it pays: non-causal, on tiers with native bf16
//     (avx512_bf16, amx: oneDNN bf16 matmuls over query chunks, an exact softmax over the
//     whole key range of a chunk). Elsewhere (causal, avx2, avx512) the request runs the f32
//     kernel, bit for bit. attention_path() says which.
enum class AttentionPrecision : uint8_t { f32, bf16 };

struct AttentionParams {
  float scale = 0.0f;  // 0: 1 / sqrt(head_dim)
  bool causal = true;
  AttentionPrecision precision = AttentionPrecision::f32;
};

// q: [Tq, Hq, D]; k, v: [Tk, Hkv, D]; f32, last dim contiguous. cu_seqlens_q/_k delimit the
// sequences. kv_lens ([num_seqs] i32, or undefined) is the padding mask: only the first
// kv_lens[s] keys of sequence s are attended (the rest of its slot is padding).
// Returns [Tq, Hq, D] f32.
struct AttentionSeqs {
  Tensor cu_seqlens_q;
  Tensor cu_seqlens_k;
  Tensor kv_lens;  // optional
};
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSeqs& seqs,
                 const AttentionParams& params = {});

// A paged KV cache as the kernels see it (the KV manager in engines/ owns the blocks).
struct PagedKv {
  Tensor k_cache, v_cache;  // [num_blocks, block_size, Hkv, D] f32, bf16 or i8
  // i8 caches only: [num_blocks, Hkv] f32, one symmetric scale per (block, kv head):
  // value = int8 * scale. Undefined for f32 and bf16 caches.
  Tensor k_scale, v_scale;
  Tensor block_tables;      // [num_seqs, max_blocks_per_seq] i32
  Tensor context_lens;      // [num_seqs] i32: tokens in the cache, this step's included
};
// Writes this step's k, v ([T, Hkv, D] f32) into the cache at slot_mapping ([T] i32:
// block * block_size + offset; a negative slot skips the token).
// NOTE (i8): sequences fill a block from offset 0, so a write at offset 0 starts the block
// afresh (its scales are reset to that token's). Afterwards a (block, head) scale only grows:
// a token whose absmax exceeds it raises it and requantises the rows already there.
void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, PagedKv& kv);
// q: [Tq, Hq, D]; cu_seqlens_q: [num_seqs + 1] i32. Keys and values of sequence s are the
// first context_lens[s] slots of its block table. Returns [Tq, Hq, D] f32.
Tensor paged_attention(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKv& kv,
                       const AttentionParams& params = {});
// The kernel attention takes on the active tier, in words (prism info).
std::string attention_path();

// ---------------------------------------------------------------------------------------
// Convolutions (oneDNN), f32. Weights in PyTorch layout; bias [out_channels] or undefined.
struct Conv1dParams {
  int stride = 1, padding = 0, dilation = 1, groups = 1;
};
// x: [N, C_in, L]; weight: [C_out, C_in / groups, K]. Returns [N, C_out, L_out].
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv1dParams& p = {});

struct Conv2dParams {
  int stride_h = 1, stride_w = 1, padding_h = 0, padding_w = 0;
  int dilation_h = 1, dilation_w = 1, groups = 1;
};
// x: [N, C_in, H, W]; weight: [C_out, C_in / groups, KH, KW]. Returns [N, C_out, H_out, W_out].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p = {});

// 2-D convolution weights packed once, at load, into the layout oneDNN's convolution wants
// (models that run a conv many times: the VAE decoder). Activations stay plain NCHW f32 at
// the op's boundary; the primitive's own layouts for them are reorders inside the call.
// Precision: f32, or bf16 (bf16 weights, activations rounded to bf16, f32 accumulate and
// output) on tiers with native bf16 (avx512_bf16, amx); on the others bf16 computes in f32
// with the weights as given (conv2d_path says which). int8 is refused.
class PackedConv;  // backend-specific; defined in runtime/cpu/conv.cpp

struct ConvWeight {
  std::shared_ptr<const PackedConv> packed;
  int64_t in_channels = 0, out_channels = 0, kernel_h = 0, kernel_w = 0;
  Conv2dParams params;
  Precision precision = Precision::f32;  // as asked; conv2d_path says how it computes
  bool has_bias = false;
  int64_t packed_bytes = 0;  // the packed weights and bias as held
  bool defined() const { return packed != nullptr; }
};

// weight: [C_out, C_in / groups, KH, KW] f32, bf16 or f16; bias: [C_out] or undefined. The
// source tensors are not referenced after packing.
Result<ConvWeight> pack_conv2d(const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
                               Precision precision);
// x: [N, C_in, H, W] f32 (any strides). Returns [N, C_out, H_out, W_out] f32, contiguous.
Tensor conv2d(const Tensor& x, const ConvWeight& w);
// How conv2d(x, ConvWeight) computes a precision on the active tier, for `prism info`.
std::string conv2d_path(Precision p);

// x: [N, C, H, W] f32, contiguous; weight, bias: [C] (either may be undefined); groups divides
// C. Normalises each (sample, group) over its C / groups channels and H * W positions, then
// applies the per-channel affine (torch.nn.GroupNorm), and SiLU after it when silu is set.
Tensor group_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups, float eps,
                  bool silu = false);
// x: [N, C, H, W] f32, contiguous. Returns [N, C, H * factor, W * factor], each pixel repeated
// factor x factor times (torch.nn.Upsample(scale_factor=factor, mode="nearest")).
Tensor upsample_nearest(const Tensor& x, int64_t factor);

// pixels: [V, C, S, S] f32, contiguous; 0 < patch_size <= S, g = S / patch_size. The rows a
// stride-patch_size convolution with a patch_size x patch_size kernel multiplies, so a ViT's
// patch embedding is one linear against the conv weight [C_out, C, p, p] read as
// [C_out, C * p * p]: patches in raster order within each view, each patch's pixels in
// (channel, row, column) order. Pixels past g * patch_size are ignored, as the conv ignores
// them. Returns [V * g * g, C * patch_size * patch_size] f32.
Tensor patchify(const Tensor& pixels, int64_t patch_size);

}  // namespace prism::ops

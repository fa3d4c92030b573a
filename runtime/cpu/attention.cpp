// runtime/cpu/attention.cpp: ops::attention, ops::store_kv and ops::paged_attention. Checks
// shapes (PRISM_CHECK: a wrong shape is a model bug), resolves the per-sequence description
// and hands it to the tiled kernel in attention_kernel.cpp. No arithmetic here beyond the
// cache writes of store_kv (conversion to bf16, quantisation to i8 with per-(block, head)
// scales).
//
// Head dims: multiples of 8 up to 128 (64, 72, 80, 96, 128 among them) take the tiled path on
// every tier; any other head dim runs on the scalar path, correct but slow.
// Padding (kv_lens): positions stay aligned to the slot length k_len from cu_seqlens_k (as
// in a right-padded batch); only which keys are attended changes.
#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>
#include <vector>

#include "runtime/cpu/attention_kernel.h"
#include "runtime/cpu/pointwise_kernels.h"
#include "runtime/cpu/row_kernels.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

void check_qkv(const Tensor& x) {
  PRISM_CHECK_MSG(x.dim() == 3, "attention: q, k, v are [tokens, heads, head_dim]");
  PRISM_CHECK_MSG(x.dtype() == DType::f32, "attention: q, k, v must be f32");
  PRISM_CHECK_MSG(x.size(2) == 1 || x.stride(2) == 1, "attention: head_dim must be contiguous");
}

// cu: [num_seqs + 1] i32, from 0, non-decreasing, ending at total.
const int32_t* check_cu_seqlens(const Tensor& cu, int64_t total) {
  PRISM_CHECK_MSG(cu.dim() == 1 && cu.size(0) >= 1 && cu.dtype() == DType::i32 && cu.is_contiguous(),
                  "attention: cu_seqlens must be [num_seqs + 1] i32");
  const int32_t* c = cu.data<int32_t>();
  PRISM_CHECK_MSG(c[0] == 0, "attention: cu_seqlens must start at 0");
  for (int64_t i = 1; i < cu.size(0); ++i) PRISM_CHECK_MSG(c[i] >= c[i - 1], "attention: cu_seqlens must not decrease");
  PRISM_CHECK_MSG(c[cu.size(0) - 1] == total, "attention: cu_seqlens must end at the token count");
  return c;
}

float resolve_scale(const AttentionParams& params, int64_t head_dim) {
  return params.scale != 0.0f ? params.scale : float(1.0 / std::sqrt(double(head_dim)));
}

void check_heads(int64_t hq, int64_t hkv) {
  PRISM_CHECK_MSG(hkv > 0 && hq % hkv == 0, "attention: num_q_heads must be a multiple of num_kv_heads");
}

// Fills in what both entry points share (queries, output, heads, scale, mask, sequences)
// on a problem whose K/V fields the caller set, and runs the kernel. Returns [Tq, Hq, D] f32.
Tensor run_problem(cpu::AttnProblem& p, const Tensor& q, int64_t hkv, const AttentionParams& params,
                   std::span<const cpu::AttnSeq> seqs) {
  const int64_t hq = q.size(1), D = q.size(2);
  Tensor out = Tensor::empty({q.size(0), hq, D}, DType::f32);
  p.q = q.data<float>();
  p.q_stride_t = q.stride(0);
  p.q_stride_h = q.stride(1);
  p.out = out.data<float>();
  p.num_q_heads = int(hq);
  p.num_kv_heads = int(hkv);
  p.head_dim = int(D);
  p.scale = resolve_scale(params, D);
  p.causal = params.causal;
  p.seqs = seqs;
  // bf16 where it pays (runtime/ops.h): non-causal, contiguous f32 K/V, native bf16.
  if (params.precision == AttentionPrecision::bf16 && !p.causal && p.block_size == 0 && p.kv_dtype == DType::f32 &&
      cpu::attention_bf16_native())
    cpu::run_attention_bf16(p);
  else
    cpu::run_attention(p);
  return out;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSeqs& seqs,
                 const AttentionParams& params) {
  check_qkv(q);
  check_qkv(k);
  check_qkv(v);
  PRISM_CHECK_MSG(k.shape() == v.shape(), "attention: k and v shapes differ");
  const int64_t D = q.size(2), hq = q.size(1), hkv = k.size(1);
  PRISM_CHECK_MSG(k.size(2) == D, "attention: q and k head dims differ");
  check_heads(hq, hkv);
  const int32_t* cu_q = check_cu_seqlens(seqs.cu_seqlens_q, q.size(0));
  const int32_t* cu_k = check_cu_seqlens(seqs.cu_seqlens_k, k.size(0));
  const int64_t num_seqs = seqs.cu_seqlens_q.size(0) - 1;
  PRISM_CHECK_MSG(seqs.cu_seqlens_k.size(0) == num_seqs + 1, "attention: cu_seqlens_q and _k differ in length");
  const int32_t* kv_lens = nullptr;
  if (seqs.kv_lens.defined()) {
    PRISM_CHECK_MSG(seqs.kv_lens.dim() == 1 && seqs.kv_lens.size(0) == num_seqs &&
                        seqs.kv_lens.dtype() == DType::i32 && seqs.kv_lens.is_contiguous(),
                    "attention: kv_lens must be [num_seqs] i32");
    kv_lens = seqs.kv_lens.data<int32_t>();
  }

  thread_local std::vector<cpu::AttnSeq> seq_list;
  seq_list.resize(size_t(num_seqs));
  for (int64_t s = 0; s < num_seqs; ++s) {
    cpu::AttnSeq& a = seq_list[s];
    a.q_start = cu_q[s];
    a.q_len = cu_q[s + 1] - cu_q[s];
    a.k_start = cu_k[s];
    a.k_len = cu_k[s + 1] - cu_k[s];
    a.k_valid = a.k_len;
    if (kv_lens) {
      PRISM_CHECK_MSG(kv_lens[s] >= 0 && kv_lens[s] <= a.k_len, "attention: kv_lens out of [0, k_len]");
      a.k_valid = kv_lens[s];
    }
    a.block_table = nullptr;
  }

  cpu::AttnProblem p;
  p.k = k.data<float>();
  p.v = v.data<float>();
  p.kv_dtype = DType::f32;
  p.k_stride_t = k.stride(0);
  p.k_stride_h = k.stride(1);
  p.v_stride_t = v.stride(0);
  p.v_stride_h = v.stride(1);
  p.block_size = 0;
  return run_problem(p, q, hkv, params, seq_list);
}

namespace {

void check_cache(const PagedKv& kv) {
  PRISM_CHECK_MSG(kv.k_cache.dim() == 4 && kv.k_cache.shape() == kv.v_cache.shape(),
                  "paged kv: k_cache and v_cache are [num_blocks, block_size, Hkv, D]");
  const DType dtype = kv.k_cache.dtype();
  PRISM_CHECK_MSG(kv.v_cache.dtype() == dtype && (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::i8),
                  "paged kv: caches must both be f32, both bf16 or both i8");
  PRISM_CHECK_MSG(kv.k_cache.is_contiguous() && kv.v_cache.is_contiguous(), "paged kv: caches must be contiguous");
  if (dtype != DType::i8) return;
  for (const Tensor* scale : {&kv.k_scale, &kv.v_scale})
    PRISM_CHECK_MSG(scale->defined() && scale->dim() == 2 && scale->size(0) == kv.k_cache.size(0) &&
                        scale->size(1) == kv.k_cache.size(2) && scale->dtype() == DType::f32 && scale->is_contiguous(),
                    "paged kv: i8 caches need k_scale and v_scale [num_blocks, Hkv] f32");
}

template <class T>
void store_rows(const Tensor& src, const int32_t* slots, const Tensor& cache) {
  const int64_t T_ = src.size(0), H = src.size(1), D = src.size(2);
  const float* s = src.data<float>();
  T* c = static_cast<T*>(cache.raw_data());
  const int64_t st = src.stride(0), sh = src.stride(1);
  parallel_for(T_, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (slots[t] < 0) continue;
      for (int64_t h = 0; h < H; ++h) {
        const float* from = s + t * st + h * sh;
        T* to = c + (int64_t(slots[t]) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) {
          if constexpr (std::is_same_v<T, float>) to[d] = from[d];
          else to[d] = f32_to_bf16(from[d]);
        }
      }
    }
  });
}

// ---- i8 cache writes ----
// NOTE: one symmetric scale per (block, kv head) (runtime/ops.h): value = q * scale with
// scale = the largest absmax / 127 of the rows written to the block since its offset-0 write.
// A write at offset 0 resets the scale to that row's; a row whose absmax / 127 exceeds the
// scale raises it and the rows at offsets [0, offset) are requantised to the new scale,
// q' = round(q * (old / new)), so every row of a block always decodes with the block's one
// scale. |q'| <= 127 * old / new < 127: no clipping. Each requantisation adds at most half a
// step of the new scale to an old row's error (a row written once has <= scale / 2).
// A scale that is not positive (an all-zero first row, or a block whose offset-0 write was
// never seen) counts as empty: old rows decode to 0 either way.

// The row helpers below are the tier's kernels (runtime/cpu/kernels/rows.cpp, pointwise.cpp).

// absmax of n floats.
float row_absmax(const float* x, int64_t n) { return cpu::row_kernels().absmax(x, n); }

// dst[i] = round_half_even(x[i] * inv_scale), clamped to [-127, 127].
void quantize_row(const float* x, int64_t n, float inv_scale, int8_t* dst) {
  cpu::pointwise_kernels().quantize_i8(x, inv_scale, dst, n);
}

// Rows q[0, n) of D int8 each: q = round_half_even(q * ratio), ratio in [0, 1).
void requantize_rows(int8_t* q, int64_t n, int64_t row_stride, int64_t D, float ratio) {
  const auto requantize = cpu::pointwise_kernels().requantize_i8;
  for (int64_t r = 0; r < n; ++r) requantize(q + r * row_stride, ratio, D);
}

// One cache (k or v) for one kv head: the tokens in order (a later token of a block may
// requantise what an earlier one wrote).
void store_head_i8(const Tensor& src, const int32_t* slots, int64_t h, int64_t block_size, const Tensor& cache,
                   float* scales) {
  const int64_t T_ = src.size(0), H = src.size(1), D = src.size(2);
  const float* s = src.data<float>();
  int8_t* c = static_cast<int8_t*>(cache.raw_data());
  for (int64_t t = 0; t < T_; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
    const float* from = s + t * src.stride(0) + h * src.stride(1);
    const float want = row_absmax(from, D) / 127.0f;
    float& scale = scales[block * H + h];
    int8_t* block_rows = c + (block * block_size * H + h) * D;  // offset 0 of (block, head)
    if (offset == 0 || !(scale > 0.0f)) {
      if (offset > 0) requantize_rows(block_rows, offset, H * D, D, 0.0f);
      scale = want;
    } else if (want > scale) {
      requantize_rows(block_rows, offset, H * D, D, scale / want);
      scale = want;
    }
    quantize_row(from, D, scale > 0.0f ? 1.0f / scale : 0.0f, block_rows + offset * H * D);
  }
}

void store_i8(const Tensor& k, const Tensor& v, const int32_t* slots, PagedKv& kv) {
  const int64_t H = k.size(1), block_size = kv.k_cache.size(1);
  // NOTE: race-free by construction: a work item owns one (cache, head) column of every
  // block, and walks the tokens in order.
#pragma omp parallel for schedule(dynamic, 1) if (2 * H > 1 && k.size(0) * H * k.size(2) >= 4096)
  for (int64_t i = 0; i < 2 * H; ++i) {
    const bool is_v = i >= H;
    store_head_i8(is_v ? v : k, slots, i % H, block_size, is_v ? kv.v_cache : kv.k_cache,
                  (is_v ? kv.v_scale : kv.k_scale).data<float>());
  }
}

}  // namespace

void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, PagedKv& kv) {
  check_cache(kv);
  check_qkv(k);
  check_qkv(v);
  PRISM_CHECK_MSG(k.shape() == v.shape(), "store_kv: k and v shapes differ");
  const int64_t num_slots = kv.k_cache.size(0) * kv.k_cache.size(1);
  PRISM_CHECK_MSG(k.size(1) == kv.k_cache.size(2) && k.size(2) == kv.k_cache.size(3),
                  "store_kv: k, v must be [T, Hkv, D] of the cache");
  PRISM_CHECK_MSG(slot_mapping.dim() == 1 && slot_mapping.size(0) == k.size(0) &&
                      slot_mapping.dtype() == DType::i32 && slot_mapping.is_contiguous(),
                  "store_kv: slot_mapping must be [T] i32");
  const int32_t* slots = slot_mapping.data<int32_t>();
  for (int64_t t = 0; t < k.size(0); ++t) PRISM_CHECK_MSG(slots[t] < num_slots, "store_kv: slot past the cache");
  if (kv.k_cache.dtype() == DType::i8) {
    store_i8(k, v, slots, kv);
  } else if (kv.k_cache.dtype() == DType::f32) {
    store_rows<float>(k, slots, kv.k_cache);
    store_rows<float>(v, slots, kv.v_cache);
  } else {
    store_rows<bf16>(k, slots, kv.k_cache);
    store_rows<bf16>(v, slots, kv.v_cache);
  }
}

Tensor paged_attention(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKv& kv,
                       const AttentionParams& params) {
  check_qkv(q);
  check_cache(kv);
  const int64_t num_blocks = kv.k_cache.size(0), block_size = kv.k_cache.size(1);
  const int64_t hkv = kv.k_cache.size(2), D = kv.k_cache.size(3), hq = q.size(1);
  PRISM_CHECK_MSG(q.size(2) == D, "paged_attention: q and cache head dims differ");
  check_heads(hq, hkv);
  const int32_t* cu_q = check_cu_seqlens(cu_seqlens_q, q.size(0));
  const int64_t num_seqs = cu_seqlens_q.size(0) - 1;
  const Tensor& bt = kv.block_tables;
  PRISM_CHECK_MSG(bt.dim() == 2 && bt.size(0) == num_seqs && bt.dtype() == DType::i32 && bt.stride(1) == 1,
                  "paged_attention: block_tables must be [num_seqs, max_blocks] i32");
  const Tensor& cl = kv.context_lens;
  PRISM_CHECK_MSG(cl.dim() == 1 && cl.size(0) == num_seqs && cl.dtype() == DType::i32 && cl.is_contiguous(),
                  "paged_attention: context_lens must be [num_seqs] i32");
  const int32_t* tables = bt.data<int32_t>();
  const int32_t* ctx = cl.data<int32_t>();

  thread_local std::vector<cpu::AttnSeq> seq_list;
  seq_list.resize(size_t(num_seqs));
  for (int64_t s = 0; s < num_seqs; ++s) {
    cpu::AttnSeq& a = seq_list[s];
    a.q_start = cu_q[s];
    a.q_len = cu_q[s + 1] - cu_q[s];
    a.k_len = a.k_valid = ctx[s];
    a.k_start = 0;
    a.block_table = tables + s * bt.stride(0);
    PRISM_CHECK_MSG(ctx[s] >= 0 && ctx[s] <= bt.size(1) * block_size, "paged_attention: context_len past the block table");
    if (a.q_len == 0) continue;  // its blocks are never read
    for (int64_t b = 0; b < (ctx[s] + block_size - 1) / block_size; ++b)
      PRISM_CHECK_MSG(a.block_table[b] >= 0 && a.block_table[b] < num_blocks, "paged_attention: block id out of range");
  }

  cpu::AttnProblem p;
  p.k = kv.k_cache.raw_data();
  p.v = kv.v_cache.raw_data();
  p.kv_dtype = kv.k_cache.dtype();
  p.k_stride_t = p.v_stride_t = hkv * D;
  p.k_stride_h = p.v_stride_h = D;
  p.block_size = int(block_size);
  if (p.kv_dtype == DType::i8) {
    p.k_scale = kv.k_scale.data<float>();
    p.v_scale = kv.v_scale.data<float>();
  }
  return run_problem(p, q, hkv, params, seq_list);
}

}  // namespace prism::ops

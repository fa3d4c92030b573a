// runtime/cpu/attention_kernel.h: the tiled, online-softmax attention kernel behind
// ops::attention and ops::paged_attention, internal to runtime/cpu/. It sees raw pointers and
// strides, a list of sequences and where each key row lives (a contiguous tensor or a paged
// cache); attention.cpp checks shapes and builds that description. attention_kernel.cpp plans
// and merges the work, the active tier's attention_tile.h kernel computes it. The kernel does
// not check shapes, never allocates in steady state (thread_local scratch that grows) and
// threads only through OpenMP.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/dtype.h"

namespace prism::cpu {

// One sequence of a flat batch.
struct AttnSeq {
  int64_t q_start = 0;  // first query token of the sequence in q and out
  int q_len = 0;
  int k_len = 0;    // keys of the sequence: query i sits at position k_len - q_len + i
  int k_valid = 0;  // keys attended, <= k_len (less with a padding mask)
  int64_t k_start = 0;                   // contiguous K/V: the sequence's first key token
  const int32_t* block_table = nullptr;  // paged K/V: the sequence's block table row
};

struct AttnProblem {
  const float* q = nullptr;  // [Tq, Hq, D] f32, last dim contiguous
  int64_t q_stride_t = 0, q_stride_h = 0;
  float* out = nullptr;  // [Tq, Hq, D] f32, contiguous

  // Keys and values: f32 or bf16, or i8 in a paged cache. Contiguous (block_size == 0): key j
  // of a sequence is token k_start + j. Paged (block_size > 0): key j is slot
  // block_table[j / bs] * bs + j % bs. Strides are in elements, per token (or slot) and per head.
  const void* k = nullptr;
  const void* v = nullptr;
  DType kv_dtype = DType::f32;
  int64_t k_stride_t = 0, k_stride_h = 0, v_stride_t = 0, v_stride_h = 0;
  int block_size = 0;
  // i8 only: [num_blocks, num_kv_heads] f32, value = int8 * scale of the slot's (block, head).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;

  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;  // resolved: never 0 here
  bool causal = true;
  std::span<const AttnSeq> seqs;
};

// Writes every row of p.out that belongs to a sequence (rows with no key to attend get 0).
void run_attention(const AttnProblem& p);

// Whether head_dim takes the tiled path on the active tier: multiples of 8 up to 128 on every
// tier (else the scalar path, which takes any head_dim).
bool attention_fast_path(int head_dim);

// AttentionPrecision::bf16 (attention_bf16.cpp): whether the tier has native bf16 (else the
// request runs run_attention), oneDNN's implementation of its matmuls ("none" without), and
// the run itself: non-causal, contiguous f32 K/V; every row of p.out that belongs to a sequence.
bool attention_bf16_native();
std::string attention_bf16_impl();
void run_attention_bf16(const AttnProblem& p);

}  // namespace prism::cpu

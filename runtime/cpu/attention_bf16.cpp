// runtime/cpu/attention_bf16.cpp: ops::attention at AttentionPrecision::bf16 on the tiers with
// native bf16: long non-causal sequences (the image transformers' self-attention) as GEMMs on
// oneDNN's bf16 matmuls (AMX or avx512_bf16 brgemm) instead of the f32 FMA tiles.
//   1. Q, K, V are rounded to bf16 into head-major copies ([H, T, D]: a head's rows of a
//      sequence are one dense [T, D] matrix).
//   2. Work items are (sequence, query head, chunk of query rows), in an OpenMP loop; each runs
//      oneDNN single-threaded (oneDNN inside a parallel region does) with its own scratch:
//      S = scale * Q_c K^T   [q_c, T_k] f32   (bf16 x bf16 -> f32)
//      P = exp(S - rowmax)   rounded to bf16, l = the f32 row sums of exp(S - rowmax)
//      O = (P V) / l         [q_c, D] f32     (bf16 x bf16 -> f32), written to the output
//   The softmax is exact over the chunk's whole key range (no online rescaling): q_c is chosen
//   so that S stays within kScoreFloats per thread.
//
// NOTE (chunk size): bench/z_image_block_bench 1024 1 attention (4224 keys, 30 heads of 128,
// 2 threads, AMX, a shared machine): S at 1 MiB a thread (48-row chunks) 1030 ms, 2 MiB 876,
// 4 MiB (240 rows) 765-777, 8 MiB (496 rows) 776, 16 MiB 2186. Single-threaded oneDNN runs
// one item's Q K^T (K = 128) at ~530-590 GFLOP/s and its P V (K = 4224) at ~830: the short
// reduction of Q K^T and the f32 softmax passes over S are what keeps the whole at ~35% of
// the 2-thread 2048^3 peak. A fused (flash-style) AMX kernel would be the next step.
// Must not: run causal or masked-by-position work (attention.cpp sends it to the f32 kernel),
// allocate per call once warm beyond oneDNN's memory handles, or share a oneDNN scratchpad
// between threads (oneDNN 2.6's library scratchpad is not safe under concurrent execution:
// see the NOTE in linear.cpp), or hold the cache lock while a primitive runs.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "runtime/cpu/attention_kernel.h"
#include "runtime/cpu/dnnl_context.h"
#include "runtime/cpu/linear_kernels.h"
#include "runtime/cpu/row_kernels.h"
#include "runtime/cpu/scratch_buffer.h"
#include "runtime/threads.h"

namespace prism::cpu {
namespace {

using dt = dnnl::memory::data_type;

// Floats of one item's score block S (4 MiB): with P (half of it in bf16) it stays within a
// thread's share of the L3 on the machines we run on, and q_c stays >= 64 rows up to ~16k keys.
constexpr int64_t kScoreFloats = int64_t(1) << 20;
constexpr int64_t kMaxChunkRows = 256;  // more rows gain nothing in the GEMMs' efficiency
constexpr int64_t kRowAlign = 16;       // AMX tiles and brgemm blocks are 16 rows
constexpr size_t kMaxCachedPrimitives = 256;

struct Plan {
  dnnl::matmul prim;
  dnnl::memory::desc src, weights, dst;
  size_t scratch_bytes = 0;
  std::string impl;  // oneDNN's implementation name ("brg:avx512_core_amx_bf16", ...)
};

// Two products per item, keyed by (which, M, N, K, scale bits):
//   which 0: S [M, N] = alpha * Q [M, K] . K^T, K^T read from a dense [N, K] as [K, N] (strides 1, K);
//   which 1: O [M, N] = P [M, K] . V [K, N], all dense.
std::mutex g_mu;  // guards the cache only
std::map<std::vector<int64_t>, Plan>& plans() {
  static std::map<std::vector<int64_t>, Plan> c;
  return c;
}

Plan make_plan(int which, int64_t M, int64_t N, int64_t K, float alpha) {
  Plan p;
  p.src = dnnl::memory::desc({M, K}, dt::bf16, dnnl::memory::dims{K, 1});
  p.weights = which == 0 ? dnnl::memory::desc({K, N}, dt::bf16, dnnl::memory::dims{1, K})
                         : dnnl::memory::desc({K, N}, dt::bf16, dnnl::memory::dims{N, 1});
  p.dst = dnnl::memory::desc({M, N}, dt::f32, dnnl::memory::dims{N, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, p.weights, p.dst), attr, dnnl_engine());
  p.scratch_bytes = pd.scratchpad_desc().get_size();
  p.impl = pd.impl_info_str();
  p.prim = dnnl::matmul(pd);
  return p;
}

Plan find_plan(int which, int64_t M, int64_t N, int64_t K, float alpha) {
  uint32_t bits;
  std::memcpy(&bits, &alpha, 4);
  std::vector<int64_t> key{which, M, N, K, bits};
  std::lock_guard<std::mutex> lock(g_mu);
  auto& c = plans();
  auto it = c.find(key);
  if (it != c.end()) return it->second;
  if (c.size() >= kMaxCachedPrimitives) c.clear();
  // Returned by value (refcounted handles): a later clear() never frees a running primitive.
  return c.emplace(std::move(key), make_plan(which, M, N, K, alpha)).first->second;
}

void run_plan(const Plan& plan, const void* a, const void* b, float* c) {
  thread_local ScratchBuffer scratch;
  dnnl::engine& eng = dnnl_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(plan.src, eng, const_cast<void*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(plan.weights, eng, const_cast<void*>(b))},
      {DNNL_ARG_DST, dnnl::memory(plan.dst, eng, c)}};
  if (plan.scratch_bytes)
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory({{int64_t(plan.scratch_bytes)}, dt::u8, dnnl::memory::dims{1}}, eng,
                                                   scratch.get(plan.scratch_bytes)));
  plan.prim.execute(dnnl_stream(), args);
  dnnl_stream().wait();
}

// x: [T, H, D] f32 rows (strides st, sh; D contiguous) -> out [H, T, D] bf16, dense.
void to_head_major_bf16(const float* x, int64_t T, int64_t H, int64_t D, int64_t st, int64_t sh, bf16* out) {
  const auto to_bf16 = linear_row_kernels().to_bf16;
  parallel_for(T, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t h = 0; h < H; ++h) to_bf16(x + t * st + h * sh, D, out + (h * T + t) * D);
  });
}

struct Item {
  int seq, head;
  int q0, q1;  // query rows [q0, q1) of the sequence
};

// Rows per chunk for a sequence of k keys: within kScoreFloats, a multiple of kRowAlign,
// spread evenly over the chunks the sequence needs.
int64_t chunk_rows(int64_t q_len, int64_t k_len) {
  int64_t most = std::clamp(kScoreFloats / std::max<int64_t>(k_len, 1) / kRowAlign * kRowAlign, kRowAlign, kMaxChunkRows);
  const int64_t chunks = (q_len + most - 1) / most;
  const int64_t rows = (q_len + chunks - 1) / chunks;
  return std::min(q_len, (rows + kRowAlign - 1) / kRowAlign * kRowAlign);
}

ScratchBuffer& buffer(int i) {
  thread_local ScratchBuffer b[4];
  return b[i];
}

}  // namespace

bool attention_bf16_native() { return active_isa() >= Isa::avx512_bf16; }

std::string attention_bf16_impl() {
  if (!attention_bf16_native()) return "none";
  return find_plan(0, 256, 1024, 128, 1.0f).impl;
}

void run_attention_bf16(const AttnProblem& p) {
  PRISM_CHECK_MSG(!p.causal && p.block_size == 0 && p.kv_dtype == DType::f32,
                  "attention bf16: non-causal, contiguous f32 K/V only");
  const int64_t Hq = p.num_q_heads, Hkv = p.num_kv_heads, D = p.head_dim;
  const int64_t group = Hq / Hkv;
  int64_t Tq = 0, Tk = 0;  // the flat token counts the sequences cover
  for (const AttnSeq& s : p.seqs) {
    Tq = std::max(Tq, s.q_start + s.q_len);
    Tk = std::max(Tk, s.k_start + s.k_len);
  }
  // Head-major bf16 copies, held by the calling thread (only grow).
  thread_local ScratchBuffer qbuf, kbuf, vbuf;
  bf16* qb = static_cast<bf16*>(qbuf.get(size_t(Hq * Tq * D) * sizeof(bf16)));
  bf16* kb = static_cast<bf16*>(kbuf.get(size_t(Hkv * Tk * D) * sizeof(bf16)));
  bf16* vb = static_cast<bf16*>(vbuf.get(size_t(Hkv * Tk * D) * sizeof(bf16)));
  to_head_major_bf16(p.q, Tq, Hq, D, p.q_stride_t, p.q_stride_h, qb);
  to_head_major_bf16(static_cast<const float*>(p.k), Tk, Hkv, D, p.k_stride_t, p.k_stride_h, kb);
  to_head_major_bf16(static_cast<const float*>(p.v), Tk, Hkv, D, p.v_stride_t, p.v_stride_h, vb);

  thread_local std::vector<Item> items;
  items.clear();
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const AttnSeq& a = p.seqs[s];
    if (a.q_len == 0) continue;
    if (a.k_valid == 0) {  // nothing to attend: zero rows, as the f32 kernel writes
      for (int64_t i = 0; i < a.q_len; ++i) std::fill_n(p.out + (a.q_start + i) * Hq * D, Hq * D, 0.0f);
      continue;
    }
    const int64_t rows = chunk_rows(a.q_len, a.k_valid);
    for (int h = 0; h < Hq; ++h)
      for (int64_t q0 = 0; q0 < a.q_len; q0 += rows)
        items.push_back({int(s), h, int(q0), int(std::min<int64_t>(a.q_len, q0 + rows))});
  }

  const RowKernels& rk = row_kernels();
  const auto to_bf16 = linear_row_kernels().to_bf16;
  // NOTE: inside the parallel region `items` would name each thread's own thread_local list:
  // the workers read the caller's through this pointer.
  const Item* item_list = items.data();
  const int64_t n_items = int64_t(items.size());
#pragma omp parallel for schedule(dynamic, 1) if (n_items > 1)
  for (int64_t i = 0; i < n_items; ++i) {
    const Item& it = item_list[i];
    const AttnSeq& a = p.seqs[size_t(it.seq)];
    const int64_t M = it.q1 - it.q0, N = a.k_valid, kvh = it.head / group;
    float* S = static_cast<float*>(buffer(0).get(size_t(M * N) * sizeof(float)));  // [M, N] f32
    bf16* P = static_cast<bf16*>(buffer(1).get(size_t(M * N) * sizeof(bf16)));     // [M, N] bf16
    float* O = static_cast<float*>(buffer(2).get(size_t(M * D) * sizeof(float)));  // [M, D] f32
    float* sums = static_cast<float*>(buffer(3).get(size_t(N / kRowSumBlock + 1) * sizeof(float)));
    const bf16* q = qb + (it.head * Tq + a.q_start + it.q0) * D;  // [M, D]
    const bf16* k = kb + (kvh * Tk + a.k_start) * D;               // [N, D]
    const bf16* v = vb + (kvh * Tk + a.k_start) * D;               // [N, D]
    run_plan(find_plan(0, M, N, D, p.scale), q, k, S);
    float inv_l[kMaxChunkRows];
    for (int64_t r = 0; r < M; ++r) {
      float* s = S + r * N;
      rk.exp_shifted(s, s, N, rk.max(s, N));
      inv_l[r] = float(1.0 / rk.block_sums(s, N, sums));
      to_bf16(s, N, P + r * N);
    }
    run_plan(find_plan(1, M, D, N, 1.0f), P, v, O);
    for (int64_t r = 0; r < M; ++r) {
      float* dst = p.out + (a.q_start + it.q0 + r) * Hq * D + it.head * D;
      const float* o = O + r * D;
      for (int64_t d = 0; d < D; ++d) dst[d] = o[d] * inv_l[r];
    }
  }
}

}  // namespace prism::cpu

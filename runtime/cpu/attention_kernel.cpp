// runtime/cpu/attention_kernel.cpp: flash-style attention on AVX-512, plus a scalar path for
// other head dims and CPUs. Work is cut into items of (sequence, block of query tokens, kv
// heads, the q heads sharing each kv head); an item walks its keys in tiles of 64, and for
// each tile and kv head computes S = Q K^T (keys along vector lanes: the tile's K is
// transposed once and shared by every q head of the group), the softmax update, then P V.
// It must not allocate per call once warm, nor start threads beyond the OpenMP pool.
//
// NOTE: online softmax. For each query row the item keeps m (the largest score seen), l (the
// sum of exp(s - m) over the keys seen) and o (the sum of exp(s - m) * v). A tile whose max
// raises m to m' multiplies l and o by exp(m - m') first, so after every tile
// o / l = softmax(scores seen) . V exactly as if all keys so far were one tile; the last
// division gives the attention output. A row that has seen no key has m = -inf, l = 0, o = 0
// and writes 0. Scores are kept in log2 units (q is pre-scaled by scale * log2 e) so every
// exp is an exp2. Long key ranges with too few items for the threads are split
// (flash-decoding): each split keeps its own (m, l, o) and merge_group combines them with
// the same rescaling.
#include "runtime/cpu/attention_kernel.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "runtime/arena.h"
#include "base/check.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace prism::cpu {
namespace {

constexpr int kTileKeys = 64;       // keys per tile: four 16-float vectors
constexpr int kMaxRows = 64;        // query rows (token x head) per item
constexpr int kMinSplitKeys = 256;  // a flash-decoding split never has fewer keys
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.44269504088896341f;

// A work item: query tokens t0..t0+nt of a sequence, for kv heads h0..h0+nh and, of each,
// the q heads h * G + g0..g0+ng, against keys [k0, k1). Row r of the item is kv head
// h0 + r / (nt * ng), then token t0 + (r % (nt * ng)) / ng, then q head g0 + r % ng.
// Decode items take several kv heads so that each tile reads whole cache blocks (all heads
// of a token are adjacent) instead of 512-byte rows 4 KiB apart.
struct WorkItem {
  int seq = 0;
  int h0 = 0, nh = 1;
  int t0 = 0, nt = 0;
  int g0 = 0, ng = 0;
  int k0 = 0, k1 = 0;
  int64_t partial = -1;  // -1: writes out; else offset (floats) of its (m, l, o) rows
  int64_t cost = 0;

  int rows_per_head() const { return nt * ng; }
  int rows() const { return nh * nt * ng; }
  int token(int r) const { return t0 + (r % rows_per_head()) / ng; }
  int kv_head(int r) const { return h0 + r / rows_per_head(); }
  int q_head(int r, int group) const { return kv_head(r) * group + g0 + r % ng; }
};

// A split item's parts, merged after the parallel loop.
struct MergeGroup {
  WorkItem item;          // k range: the whole item
  int64_t first = 0;      // offset of the first part's partial rows
  int num_parts = 0;      // parts lie back to back, each rows * (D + 2) floats
};

// 64-byte aligned float scratch that only grows.
class AlignedBuffer {
 public:
  float* get(size_t n) {
    if (n > capacity_) {
      memory_ = allocate_aligned(n * sizeof(float));
      capacity_ = n;
    }
    return static_cast<float*>(memory_.get());
  }

 private:
  std::shared_ptr<void> memory_;
  size_t capacity_ = 0;
};

// Asks for the K and V rows of the next (tile, head) into L2 a line or two at a time from
// inside the compute loops: decode is bound by memory, one head's row (512 bytes, 4 KiB from
// the next) is too short for the hardware prefetcher, and a burst of a thousand prefetches
// would stall the core instead of overlapping with the arithmetic.
class Prefetcher {
 public:
  void start(const AttnProblem& p, const int64_t* rows, int h, int n) {
    const int64_t es = dtype_size(p.kv_dtype);
    k_ = static_cast<const char*>(p.k) + h * p.k_stride_h * es;
    v_ = static_cast<const char*>(p.v) + h * p.v_stride_h * es;
    k_stride_ = p.k_stride_t * es;
    v_stride_ = p.v_stride_t * es;
    rows_ = rows;
    n_ = n;
    lines_ = int((p.head_dim * es + 63) / 64);
    row_ = line_ = 0;
  }
  void stop() { n_ = 0; }
  void step() {
    if (row_ >= n_) return;
    __builtin_prefetch(k_ + rows_[row_] * k_stride_ + line_ * 64, 0, 2);
    __builtin_prefetch(v_ + rows_[row_] * v_stride_ + line_ * 64, 0, 2);
    if (++line_ == lines_) line_ = 0, ++row_;
  }

 private:
  const char* k_ = nullptr;
  const char* v_ = nullptr;
  int64_t k_stride_ = 0, v_stride_ = 0;
  const int64_t* rows_ = nullptr;
  int n_ = 0, lines_ = 0, row_ = 0, line_ = 0;
};

// Per-thread tile state. Row r of an item is (token t0 + r / ng, head g0 + r % ng).
struct Scratch {
  AlignedBuffer q;       // [rows, D] queries times scale
  AlignedBuffer kt;      // [D, 64] the key tile transposed: keys along vector lanes
  AlignedBuffer s;       // [rows, 64] scores, then probabilities
  AlignedBuffer o;       // [rows, D] unnormalised output
  AlignedBuffer k_conv;  // [64, D] bf16 or i8 keys converted to f32
  AlignedBuffer v_conv;  // [64, D] bf16 or i8 values converted to f32
  AlignedBuffer l_vec;   // [rows, 16] lane-wise partial sums of l (AVX-512 path)
  float m[kMaxRows], l[kMaxRows], alpha[kMaxRows];
  int lim[kMaxRows];    // keys [k0, lim) are visible to the row
  int count[kMaxRows];  // valid keys of the row in the current tile
  const float* k_rows[kTileKeys];
  const float* v_rows[kTileKeys];
  int64_t rows[kTileKeys], next_rows[kTileKeys];  // cache rows of this tile's and the next tile's keys
  Prefetcher prefetch;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

int row_limit(const AttnProblem& p, const AttnSeq& s, const WorkItem& w, int t) {
  int lim = s.k_valid;
  if (p.causal) lim = std::min(lim, s.k_len - s.q_len + t + 1);
  return std::clamp(lim, w.k0, w.k1);
}

void bf16_row_to_f32(const bf16* src, int n, float* dst) {
  int i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {  // bf16 is the high half of an f32
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

// dst[i] = src[i] * scale: an i8 cache row dequantised (the product rounds once, as in
// (float(q) * scale) anywhere else, so tests can dequantise the same way bit for bit).
void i8_row_to_f32(const int8_t* src, int n, float scale, float* dst) {
  int i = 0;
#ifdef __AVX512F__
  const __m512 s = _mm512_set1_ps(scale);
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s));
  }
#endif
  for (; i < n; ++i) dst[i] = float(src[i]) * scale;
}

// Row (token or slot) of key j0 + jj for jj < n, into rows[].
void key_rows(const AttnProblem& p, const AttnSeq& s, int j0, int n, int64_t* rows) {
  if (p.block_size == 0) {
    for (int jj = 0; jj < n; ++jj) rows[jj] = s.k_start + j0 + jj;
    return;
  }
  int blk = j0 / p.block_size, off = j0 % p.block_size;
  for (int jj = 0; jj < n; ++jj) {
    rows[jj] = int64_t(s.block_table[blk]) * p.block_size + off;
    if (++off == p.block_size) off = 0, ++blk;
  }
}

// Points k_rows / v_rows at keys j0..j0+n of (sequence, kv head), converting bf16 rows and
// dequantising i8 rows (paged only: the scale is the slot's block's, rows[jj] / block_size).
void gather_tile(const AttnProblem& p, const int64_t* rows, int h, int n, Scratch& sc) {
  const int D = p.head_dim;
  if (p.kv_dtype == DType::f32) {
    for (int jj = 0; jj < n; ++jj) {
      sc.k_rows[jj] = static_cast<const float*>(p.k) + rows[jj] * p.k_stride_t + h * p.k_stride_h;
      sc.v_rows[jj] = static_cast<const float*>(p.v) + rows[jj] * p.v_stride_t + h * p.v_stride_h;
    }
    return;
  }
  float* kc = sc.k_conv.get(size_t(kTileKeys) * D);
  float* vc = sc.v_conv.get(size_t(kTileKeys) * D);
  if (p.kv_dtype == DType::i8) {
    for (int jj = 0; jj < n; ++jj) {
      float* kd = kc + int64_t(jj) * D;
      float* vd = vc + int64_t(jj) * D;
      const int64_t scale_at = rows[jj] / p.block_size * p.num_kv_heads + h;
      i8_row_to_f32(static_cast<const int8_t*>(p.k) + rows[jj] * p.k_stride_t + h * p.k_stride_h, D, p.k_scale[scale_at], kd);
      i8_row_to_f32(static_cast<const int8_t*>(p.v) + rows[jj] * p.v_stride_t + h * p.v_stride_h, D, p.v_scale[scale_at], vd);
      sc.k_rows[jj] = kd;
      sc.v_rows[jj] = vd;
    }
    return;
  }
  for (int jj = 0; jj < n; ++jj) {
    float* kd = kc + int64_t(jj) * D;
    float* vd = vc + int64_t(jj) * D;
    bf16_row_to_f32(static_cast<const bf16*>(p.k) + rows[jj] * p.k_stride_t + h * p.k_stride_h, D, kd);
    bf16_row_to_f32(static_cast<const bf16*>(p.v) + rows[jj] * p.v_stride_t + h * p.v_stride_h, D, vd);
    sc.k_rows[jj] = kd;
    sc.v_rows[jj] = vd;
  }
}

// Copies the item's query rows, times scale, into sc.q ([rows, D]).
void pack_queries(const AttnProblem& p, const AttnSeq& s, const WorkItem& w, Scratch& sc) {
  const int D = p.head_dim, G = p.num_q_heads / p.num_kv_heads;
  float* q = sc.q.get(size_t(kMaxRows) * D);
  const float q_scale = p.scale * kLog2e;  // scores in log2 units: exp2 is cheaper than exp
  for (int r = 0; r < w.rows(); ++r) {
    const float* src = p.q + (s.q_start + w.token(r)) * p.q_stride_t + int64_t(w.q_head(r, G)) * p.q_stride_h;
    float* dst = q + int64_t(r) * D;
    for (int d = 0; d < D; ++d) dst[d] = src[d] * q_scale;
  }
}

// Final rows of an item: o / l into out, or (m, l, o) into a partial slot.
void finish_item(const AttnProblem& p, const AttnSeq& s, const WorkItem& w, Scratch& sc,
                 float* partials) {
  const int D = p.head_dim, G = p.num_q_heads / p.num_kv_heads;
  const float* o = sc.o.get(size_t(kMaxRows) * D);
  for (int r = 0; r < w.rows(); ++r) {
    const float* src = o + int64_t(r) * D;
    if (w.partial >= 0) {
      float* dst = partials + w.partial + int64_t(r) * (D + 2);
      dst[0] = sc.m[r];
      dst[1] = sc.l[r];
      std::memcpy(dst + 2, src, sizeof(float) * D);
      continue;
    }
    float* dst = p.out + ((s.q_start + w.token(r)) * p.num_q_heads + w.q_head(r, G)) * int64_t(D);
    const float inv = sc.l[r] > 0.0f ? 1.0f / sc.l[r] : 0.0f;
    for (int d = 0; d < D; ++d) dst[d] = src[d] * inv;
  }
}

// ---- scalar path: any head dim, any CPU --------------------------------------------------

void run_item_scalar(const AttnProblem& p, const WorkItem& w, Scratch& sc, float* partials) {
  const AttnSeq& s = p.seqs[w.seq];
  const int D = p.head_dim, rows = w.rows(), rph = w.rows_per_head();
  pack_queries(p, s, w, sc);
  const float* q = sc.q.get(0);
  float* o = sc.o.get(size_t(kMaxRows) * D);
  int kend = w.k0;
  for (int r = 0; r < rows; ++r) {
    sc.lim[r] = row_limit(p, s, w, w.token(r));
    kend = std::max(kend, sc.lim[r]);
    sc.m[r] = kNegInf;
    sc.l[r] = 0.0f;
  }
  std::fill(o, o + int64_t(rows) * D, 0.0f);
  for (int j0 = w.k0; j0 < kend; j0 += kTileKeys) {
    const int n = std::min(kTileKeys, kend - j0);
    key_rows(p, s, j0, n, sc.rows);
    for (int r = 0; r < rows; ++r) {
      if (r % rph == 0) gather_tile(p, sc.rows, w.kv_head(r), n, sc);
      const float* qr = q + int64_t(r) * D;
      float* orow = o + int64_t(r) * D;
      const int count = std::min(sc.lim[r], j0 + n) - j0;
      for (int jj = 0; jj < count; ++jj) {
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += qr[d] * sc.k_rows[jj][d];
        const float m_new = std::max(sc.m[r], dot);
        const float alpha = std::exp2(sc.m[r] - m_new), pr = std::exp2(dot - m_new);
        sc.m[r] = m_new;
        sc.l[r] = sc.l[r] * alpha + pr;
        for (int d = 0; d < D; ++d) orow[d] = orow[d] * alpha + pr * sc.v_rows[jj][d];
      }
    }
  }
  finish_item(p, s, w, sc, partials);
}

// ---- AVX-512 tiled path ------------------------------------------------------------------

#ifdef __AVX512F__

// r[i] = row i of a 16x16 block; afterwards r[c] = column c.
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4b + c] holds, per 128-bit lane L, column 4L + c of rows 4b..4b+3.
  for (int b = 0; b < 4; ++b) {
    const __m512d t0 = _mm512_castps_pd(t[4 * b]), t1 = _mm512_castps_pd(t[4 * b + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * b + 2]), t3 = _mm512_castps_pd(t[4 * b + 3]);
    u[4 * b + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);   // lanes 0, 2
    const __m512 b = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);   // lanes 1, 3
    const __m512 e = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 f = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(a, e, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(a, e, 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(b, f, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(b, f, 0xdd);
  }
}

// kt: [D, 64] from the n (<= 64) gathered key rows; keys past n are 0.
void pack_keys_transposed(const float* const* k_rows, int n, int D, float* kt) {
  const int groups = (n + 15) / 16;
  for (int kg = 0; kg < kTileKeys / 16; ++kg)
    for (int db = 0; db < D / 16; ++db) {
      __m512 r[16];
      if (kg >= groups) {
        for (int c = 0; c < 16; ++c) _mm512_store_ps(kt + (db * 16 + c) * kTileKeys + kg * 16, _mm512_setzero_ps());
        continue;
      }
      for (int i = 0; i < 16; ++i) {
        const int j = kg * 16 + i;
        r[i] = j < n ? _mm512_loadu_ps(k_rows[j] + db * 16) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_store_ps(kt + (db * 16 + c) * kTileKeys + kg * 16, r[c]);
    }
}

// s[RQ, 64] = q[RQ, D] . kt[D, 64]: a register block of RQ rows x 4 key vectors.
template <int RQ>
void qk_block(const float* q, int D, const float* kt, float* s, Prefetcher& pf) {
  __m512 acc[RQ][4];
  for (int i = 0; i < RQ; ++i)
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int d = 0; d < D; ++d) {
    const float* ktd = kt + d * kTileKeys;
    pf.step();
    pf.step();
    const __m512 k0 = _mm512_load_ps(ktd), k1 = _mm512_load_ps(ktd + 16);
    const __m512 k2 = _mm512_load_ps(ktd + 32), k3 = _mm512_load_ps(ktd + 48);
    for (int i = 0; i < RQ; ++i) {
      const __m512 b = _mm512_set1_ps(q[i * D + d]);
      acc[i][0] = _mm512_fmadd_ps(b, k0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, k1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(b, k2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(b, k3, acc[i][3]);
    }
  }
  for (int i = 0; i < RQ; ++i)
    for (int v = 0; v < 4; ++v) _mm512_store_ps(s + i * kTileKeys + v * 16, acc[i][v]);
}

constexpr int kQkRows = 6;  // 24 accumulators + 4 key vectors + a broadcast

template <int RQ>
void qk_tail(int rem, const float* q, int D, const float* kt, float* s, Prefetcher& pf) {
  if constexpr (RQ > 0) {
    if (rem == RQ) return qk_block<RQ>(q, D, kt, s, pf);
    qk_tail<RQ - 1>(rem, q, D, kt, s, pf);
  }
}

void qk_tile(int rows, const float* q, int D, const float* kt, float* s, Prefetcher& pf) {
  int r = 0;
  for (; r + kQkRows <= rows; r += kQkRows) qk_block<kQkRows>(q + r * D, D, kt, s + r * kTileKeys, pf);
  qk_tail<kQkRows - 1>(rows - r, q + r * D, D, kt, s + r * kTileKeys, pf);
}

// 2^x for x <= 0 (the only arguments softmax has: scores minus their running max, in log2
// units). Leaner than vec_math's exp512, which also handles overflow, NaN and exact
// underflow: this is the innermost non-FMA work of the kernel. 2^x = 2^n * 2^f with
// |f| <= 1/2; 2^f by its degree-7 Taylor polynomial (relative error < 1e-8 before rounding).
// Below -126 it returns 2^-126 instead of a smaller number or 0, a relative weight no
// softmax can see; NaN in (-inf + inf) is the caller's to mask.
inline __m512 exp2_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5252733804059841e-05f);  // ln2^k / k!
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-04f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Online-softmax update of a tile's rows (see the NOTE at the top): for row r with count[r]
// valid keys, m' = max(m, tile max), alpha = exp(m - m'), p = exp(s - m') in place (0 past
// count) and l_vec = l_vec * alpha + p. l is kept as 16 lane-wise partial sums per row
// (l_vec, [rows, 16]) so that no horizontal sum is needed per tile.
void softmax_tile(int rows, float* s, const int* count, float* m, float* alpha, float* l_vec) {
  float m_tile[kMaxRows];
  for (int r = 0; r < rows; ++r) {
    m_tile[r] = kNegInf;
    if (count[r] <= 0) continue;
    __m512 mx = _mm512_set1_ps(kNegInf);
    for (int v = 0; v < 4; ++v) {
      const int c = std::clamp(count[r] - 16 * v, 0, 16);
      mx = _mm512_mask_max_ps(mx, __mmask16((1u << c) - 1u), mx, _mm512_load_ps(s + r * kTileKeys + v * 16));
    }
    m_tile[r] = _mm512_reduce_max_ps(mx);
  }
  // New maxima and rescale factors, sixteen rows at a time. A row that has still seen no key
  // (m' = -inf) keeps alpha = 1 rather than exp(-inf + inf).
  for (int r = 0; r < rows; r += 16) {
    const __mmask16 live = __mmask16((1u << std::min(16, rows - r)) - 1u);
    const __m512 mo = _mm512_maskz_loadu_ps(live, m + r);
    const __m512 mn = _mm512_max_ps(mo, _mm512_maskz_loadu_ps(live, m_tile + r));
    __m512 a = exp2_nonpositive(_mm512_sub_ps(mo, mn));
    a = _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(mn, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ), _mm512_set1_ps(1.0f));
    _mm512_mask_storeu_ps(m + r, live, mn);
    _mm512_mask_storeu_ps(alpha + r, live, a);
  }
  for (int r = 0; r < rows; ++r) {
    float* sr = s + r * kTileKeys;
    float* lr = l_vec + r * 16;
    if (count[r] <= 0) {
      for (int v = 0; v < 4; ++v) _mm512_store_ps(sr + v * 16, _mm512_setzero_ps());
      continue;
    }
    const __m512 mv = _mm512_set1_ps(m[r]);
    __m512 l = _mm512_mul_ps(_mm512_load_ps(lr), _mm512_set1_ps(alpha[r]));
    for (int v = 0; v < 4; ++v) {
      const int c = std::clamp(count[r] - 16 * v, 0, 16);
      __m512 pv = _mm512_setzero_ps();
      if (c > 0) pv = _mm512_maskz_mov_ps(__mmask16((1u << c) - 1u), exp2_nonpositive(_mm512_sub_ps(_mm512_load_ps(sr + v * 16), mv)));
      _mm512_store_ps(sr + v * 16, pv);
      l = _mm512_add_ps(l, pv);
    }
    _mm512_store_ps(lr, l);
  }
}

// o[RQ, D] = o * alpha + p[RQ, :n] . v[:n, D] with D = 16 * DV.
template <int RQ, int DV>
void pv_block(const float* p, const float* const* v_rows, int n, const float* alpha, float* o, Prefetcher& pf) {
  constexpr int D = 16 * DV;
  __m512 acc[RQ][DV];
  for (int i = 0; i < RQ; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    for (int v = 0; v < DV; ++v) acc[i][v] = _mm512_mul_ps(_mm512_load_ps(o + i * D + v * 16), a);
  }
  for (int j = 0; j < n; ++j) {
    const float* vr = v_rows[j];
    pf.step();
    pf.step();
    __m512 pb[RQ];
    for (int i = 0; i < RQ; ++i) pb[i] = _mm512_set1_ps(p[i * kTileKeys + j]);
    for (int v = 0; v < DV; ++v) {
      const __m512 vv = _mm512_loadu_ps(vr + v * 16);
      for (int i = 0; i < RQ; ++i) acc[i][v] = _mm512_fmadd_ps(pb[i], vv, acc[i][v]);
    }
  }
  for (int i = 0; i < RQ; ++i)
    for (int v = 0; v < DV; ++v) _mm512_store_ps(o + i * D + v * 16, acc[i][v]);
}

// Rows per register block: RQ * DV accumulators + RQ broadcasts + one value vector <= 32.
constexpr int pv_rows_for(int dv) { return dv <= 4 ? 6 : dv == 5 ? 5 : dv == 6 ? 4 : 3; }

template <int DV, int RQ>
void pv_tail(int rem, const float* p, const float* const* v_rows, int n, const float* alpha, float* o, Prefetcher& pf) {
  if constexpr (RQ > 0) {
    if (rem == RQ) return pv_block<RQ, DV>(p, v_rows, n, alpha, o, pf);
    pv_tail<DV, RQ - 1>(rem, p, v_rows, n, alpha, o, pf);
  }
}

template <int DV>
void pv_tile(int rows, const float* p, const float* const* v_rows, int n, const float* alpha, float* o, Prefetcher& pf) {
  constexpr int kRq = pv_rows_for(DV), D = 16 * DV;
  int r = 0;
  for (; r + kRq <= rows; r += kRq) pv_block<kRq, DV>(p + r * kTileKeys, v_rows, n, alpha + r, o + r * D, pf);
  pv_tail<DV, kRq - 1>(rows - r, p + r * kTileKeys, v_rows, n, alpha + r, o + r * D, pf);
}

using PvTileFn = void (*)(int, const float*, const float* const*, int, const float*, float*, Prefetcher&);
constexpr PvTileFn kPvTiles[9] = {nullptr,   pv_tile<1>, pv_tile<2>, pv_tile<3>, pv_tile<4>,
                                  pv_tile<5>, pv_tile<6>, pv_tile<7>, pv_tile<8>};

void run_item_avx512(const AttnProblem& p, const WorkItem& w, Scratch& sc, float* partials) {
  const AttnSeq& s = p.seqs[w.seq];
  const int D = p.head_dim, rows = w.rows(), rph = w.rows_per_head();
  pack_queries(p, s, w, sc);
  const float* q = sc.q.get(0);
  float* kt = sc.kt.get(size_t(D) * kTileKeys);
  float* st = sc.s.get(size_t(kMaxRows) * kTileKeys);
  float* o = sc.o.get(size_t(kMaxRows) * D);
  float* l_vec = sc.l_vec.get(size_t(kMaxRows) * 16);
  int kend = w.k0;
  for (int r = 0; r < rows; ++r) {
    sc.lim[r] = row_limit(p, s, w, w.token(r));
    kend = std::max(kend, sc.lim[r]);
    sc.m[r] = kNegInf;
  }
  std::fill(o, o + int64_t(rows) * D, 0.0f);
  std::fill(l_vec, l_vec + int64_t(rows) * 16, 0.0f);
  const PvTileFn pv = kPvTiles[D / 16];
  key_rows(p, s, w.k0, std::min(kTileKeys, kend - w.k0), sc.next_rows);
  for (int j0 = w.k0; j0 < kend; j0 += kTileKeys) {
    const int n = std::min(kTileKeys, kend - j0);
    const int n_next = std::min(kTileKeys, kend - j0 - n);
    std::copy(sc.next_rows, sc.next_rows + n, sc.rows);
    if (n_next > 0) key_rows(p, s, j0 + n, n_next, sc.next_rows);
    for (int r0 = 0; r0 < rows; r0 += rph) {  // one kv head's rows at a time
      // The next head of this tile, or the first head of the next tile.
      // Two (tile, head) steps ahead: this tile's later heads, then the next tile's first.
      const int ahead = (r0 / rph) + std::min(2, w.nh);
      // Contiguous K/V stream through the hardware prefetcher on their own.
      if (p.block_size == 0) sc.prefetch.stop();
      else if (ahead < w.nh) sc.prefetch.start(p, sc.rows, w.h0 + ahead, n);
      else if (n_next > 0) sc.prefetch.start(p, sc.next_rows, w.h0 + ahead - w.nh, n_next);
      else sc.prefetch.stop();
      gather_tile(p, sc.rows, w.kv_head(r0), n, sc);
      pack_keys_transposed(sc.k_rows, n, D, kt);
      qk_tile(rph, q + int64_t(r0) * D, D, kt, st, sc.prefetch);
      for (int r = r0; r < r0 + rph; ++r) sc.count[r] = std::min(sc.lim[r], j0 + n) - j0;
      softmax_tile(rph, st, sc.count + r0, sc.m + r0, sc.alpha + r0, l_vec + r0 * 16);
      pv(rph, st, sc.v_rows, n, sc.alpha + r0, o + int64_t(r0) * D, sc.prefetch);
    }
  }
  for (int r = 0; r < rows; ++r) sc.l[r] = _mm512_reduce_add_ps(_mm512_load_ps(l_vec + r * 16));
  finish_item(p, s, w, sc, partials);
}

#endif  // __AVX512F__

void run_item(const AttnProblem& p, const WorkItem& w, float* partials) {
  Scratch& sc = scratch();
#ifdef __AVX512F__
  if (attention_fast_path(p.head_dim)) return run_item_avx512(p, w, sc, partials);
#endif
  run_item_scalar(p, w, sc, partials);
}

// Combines the parts of a split item: the same rescaling as across tiles.
void merge_group(const AttnProblem& p, const MergeGroup& g, const float* partials) {
  const AttnSeq& s = p.seqs[g.item.seq];
  const int D = p.head_dim, G = p.num_q_heads / p.num_kv_heads;
  const int rows = g.item.rows();
  const int64_t part_floats = int64_t(rows) * (D + 2);
  for (int r = 0; r < rows; ++r) {
    float m = kNegInf;
    for (int c = 0; c < g.num_parts; ++c) m = std::max(m, partials[g.first + c * part_floats + r * (D + 2)]);
    float* dst = p.out + ((s.q_start + g.item.token(r)) * p.num_q_heads + g.item.q_head(r, G)) * int64_t(D);
    std::fill(dst, dst + D, 0.0f);
    if (m == kNegInf) continue;  // no part saw a key
    float l = 0.0f;
    for (int c = 0; c < g.num_parts; ++c) {
      const float* part = partials + g.first + c * part_floats + r * (D + 2);
      const float wgt = std::exp2(part[0] - m);
      l += wgt * part[1];
      for (int d = 0; d < D; ++d) dst[d] += wgt * part[2 + d];
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < D; ++d) dst[d] *= inv;
  }
}

}  // namespace

bool attention_fast_path(int head_dim) {
#ifdef __AVX512F__
  return head_dim % 16 == 0 && head_dim >= 16 && head_dim <= 128;
#else
  return false;
#endif
}

void run_attention(const AttnProblem& p) {
  const int G = p.num_q_heads / p.num_kv_heads, D = p.head_dim;
  // Heads of a group go together (each K/V tile is loaded once for all of them); groups wider
  // than kMaxRows are cut into even chunks.
  const int chunks = (G + kMaxRows - 1) / kMaxRows;
  const int ng = (G + chunks - 1) / chunks;
  const int tokens_per_item = std::max(1, kMaxRows / ng);

  thread_local std::vector<WorkItem> items;
  thread_local std::vector<MergeGroup> groups;
  thread_local AlignedBuffer partial_buffer;
  items.clear();
  groups.clear();
  for (int si = 0; si < int(p.seqs.size()); ++si) {
    const AttnSeq& s = p.seqs[si];
    // Short query runs (decode) fill the rows with more kv heads instead of more tokens.
    const int heads_per_item =
        ng < G ? 1 : std::clamp(kMaxRows / (ng * std::clamp(s.q_len, 1, tokens_per_item)), 1, p.num_kv_heads);
    for (int t0 = 0; t0 < s.q_len; t0 += tokens_per_item) {
      const int nt = std::min(tokens_per_item, s.q_len - t0);
      int kend = s.k_valid;  // the last row sees the most keys
      if (p.causal) kend = std::min(kend, s.k_len - s.q_len + t0 + nt);
      kend = std::max(kend, 0);
      for (int h0 = 0; h0 < p.num_kv_heads; h0 += heads_per_item)
        for (int g0 = 0; g0 < G; g0 += ng) {
          WorkItem w;
          w.seq = si, w.h0 = h0, w.nh = std::min(heads_per_item, p.num_kv_heads - h0);
          w.t0 = t0, w.nt = nt, w.g0 = g0, w.ng = std::min(ng, G - g0);
          w.k0 = 0, w.k1 = kend;
          w.cost = int64_t(w.rows()) * (kend + 16);
          items.push_back(w);
        }
    }
  }
  if (items.empty()) return;

  // Too few items to feed every thread (decode of a few sequences): split long key ranges.
  const int threads = omp_get_max_threads();
  const int64_t want = 4 * int64_t(threads);
  int64_t partial_floats = 0;
  if (threads > 1 && int64_t(items.size()) < want) {
    const int max_parts = int((want + items.size() - 1) / items.size());
    const size_t num_whole = items.size();
    for (size_t i = 0; i < num_whole; ++i) {
      const WorkItem whole = items[i];
      const int parts = std::min(max_parts, whole.k1 / kMinSplitKeys);
      if (parts < 2) continue;
      // Part boundaries on tile multiples so every part's tiles are full.
      const int span = (whole.k1 + parts - 1) / parts;
      const int step = (span + kTileKeys - 1) / kTileKeys * kTileKeys;
      MergeGroup g{whole, partial_floats, 0};
      const int64_t part_floats = int64_t(whole.rows()) * (D + 2);
      for (int k0 = 0; k0 < whole.k1; k0 += step) {
        WorkItem w = whole;
        w.k0 = k0, w.k1 = std::min(whole.k1, k0 + step);
        w.partial = partial_floats;
        w.cost = int64_t(w.rows()) * (w.k1 - w.k0 + 16);
        partial_floats += part_floats;
        ++g.num_parts;
        if (k0 == 0) items[i] = w;
        else items.push_back(w);
      }
      groups.push_back(g);
    }
  }
  float* partials = partial_floats > 0 ? partial_buffer.get(size_t(partial_floats)) : nullptr;

  // Largest first, handed out one at a time: causal items differ in cost by up to q_len x.
  std::sort(items.begin(), items.end(), [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });
  const int64_t num_items = int64_t(items.size());
  const WorkItem* item_data = items.data();
#pragma omp parallel for schedule(dynamic, 1) if (num_items > 1)
  for (int64_t i = 0; i < num_items; ++i) run_item(p, item_data[i], partials);

  const int64_t num_groups = int64_t(groups.size());
  const MergeGroup* group_data = groups.data();
#pragma omp parallel for schedule(dynamic, 1) if (num_groups > 1)
  for (int64_t i = 0; i < num_groups; ++i) merge_group(p, group_data[i], partials);
}

}  // namespace prism::cpu

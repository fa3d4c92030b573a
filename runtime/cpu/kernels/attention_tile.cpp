// runtime/cpu/kernels/attention_tile.cpp: one work item of the attention kernel on one tier
// (compiled once per tier; attention_kernel.cpp plans the items). An item walks its keys in
// tiles of 64, and for each tile and kv head computes S = Q K^T (keys along vector lanes: the
// tile's K is transposed once and shared by every q head of the group), the online-softmax
// update, then P V. Head dims that are multiples of 8 up to 128 take the tiled path, any other
// the scalar one. It must not allocate per call once warm, nor thread (the caller's OpenMP
// loop hands out the items).
//
// NOTE: online softmax. For each query row the item keeps m (the largest score seen), l (the
// sum of 2^(s - m) over the keys seen) and o (the sum of 2^(s - m) * v). A tile whose max
// raises m to m' multiplies l and o by 2^(m - m') first, so after every tile
// o / l = softmax(scores seen) . V exactly as if all keys so far were one tile; the last
// division gives the attention output. A row that has seen no key has m = -inf, l = 0, o = 0
// and writes 0. Scores are kept in log2 units (q is pre-scaled by scale * log2 e) so every
// exp is an exp2.
// NOTE: numerics per tier. Every score accumulates its D products in order, one FMA each, and
// every output element its keys in order: those are the same bits on every tier. Only l is
// summed in kLanes lane-wise partial sums (16 or 8) reduced at the end. The AVX-512 tiers
// repeat, operation for operation, what the AVX-512 kernel did before the tiers (same bits).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "runtime/cpu/attention_tile.h"
#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/kernels/tier_scratch.h"
#include "runtime/cpu/kernels/vec_math.h"

namespace prism::cpu::PRISM_TIER {
namespace {

constexpr int kTileKeys = kAttnTileKeys;
constexpr int kTileVecs = kTileKeys / kLanes;  // 4 vectors of 16 keys, or 8 of 8
constexpr int kMaxRows = kAttnMaxRows;
constexpr int kMaxTiledDim = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.44269504088896341f;

// Register blocks. AVX-512 (32 registers), as measured and tuned before the tiers: S in blocks
// of 6 rows x 4 vectors (the whole tile: 24 accumulators + 4 key vectors + a broadcast); P V in
// one column block of all D / 16 vectors, pv_rows_for rows. AVX2 (16 registers): S in blocks
// of 3 rows x 4 vectors of 8 keys, two key slabs a tile (12 accumulators + 3 key vectors + a
// broadcast, the fourth key read by its FMAs from L1); P V in column blocks of at most 4
// vectors, 3 rows. Measured on Zen 4 (AVX2 tier, one thread, causal prefill at D 64 and 128):
// S as 6 x 2 or 4 x 2 and P V blocks of 6 or 8 columns were as fast or up to 30% slower.
#if defined(__AVX512F__)
constexpr int kQkRows = 6, kQkVecs = 4;
constexpr int kPvCols = 8;
// Rows per P V block: RQ * DV accumulators + RQ broadcasts + one value vector <= 32.
constexpr int pv_rows_for(int dv) { return dv <= 4 ? 6 : dv == 5 ? 5 : dv == 6 ? 4 : 3; }
#else
constexpr int kQkRows = 3, kQkVecs = 4;
constexpr int kPvCols = 4;
// RQ * CV accumulators + RQ broadcasts + one value vector <= 16.
constexpr int pv_rows_for(int cv) { return cv <= 1 ? 6 : cv == 2 ? 4 : 3; }
#endif
constexpr int kQkSlabKeys = kQkVecs * kLanes;
static_assert(kTileKeys % kQkSlabKeys == 0);

// Float scratch that only grows (tier_scratch.h).
struct AlignedBuffer {
  TierScratch memory;
  float* get(size_t n) { return static_cast<float*>(memory.get(n * sizeof(float))); }
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

// Per-thread tile state; row r is the item's row r (attention_tile.h).
struct Scratch {
  AlignedBuffer q;       // [rows, D] queries times scale * log2 e
  AlignedBuffer kt;      // [D, 64] the key tile transposed: keys along vector lanes
  AlignedBuffer s;       // [rows, 64] scores, then probabilities
  AlignedBuffer o;       // [rows, o_stride] unnormalised output
  AlignedBuffer k_conv;  // [64, D] bf16 or i8 keys converted to f32
  AlignedBuffer v_conv;  // [64, D] bf16 or i8 values converted to f32
  AlignedBuffer l_vec;   // [rows, kLanes] lane-wise partial sums of l (tiled path)
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

int row_limit(const AttnProblem& p, const AttnSeq& s, const AttnItem& w, int t) {
  int lim = s.k_valid;
  if (p.causal && s.k_len - s.q_len + t + 1 < lim) lim = s.k_len - s.q_len + t + 1;
  return lim < w.k0 ? w.k0 : lim > w.k1 ? w.k1 : lim;
}

int clamp_lanes(int c) { return c < 0 ? 0 : c > kLanes ? kLanes : c; }

void bf16_row_to_f32(const bf16* src, int n, float* dst) {
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) store(dst + i, load_bf16(src + i));  // bf16: an f32's high half
  for (; i < n; ++i) {
    const uint32_t u = uint32_t(src[i].bits) << 16;
    std::memcpy(dst + i, &u, sizeof(u));
  }
}

// dst[i] = src[i] * scale: an i8 cache row dequantised (the product rounds once, as in
// (float(q) * scale) anywhere else, so tests can dequantise the same way bit for bit).
void i8_row_to_f32(const int8_t* src, int n, float scale, float* dst) {
  int i = 0;
  const Vec s = splat(scale);
  for (; i + kLanes <= n; i += kLanes) store(dst + i, load_i8(src + i) * s);
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

// Copies the item's query rows, times scale * log2 e, into sc.q ([rows, D]).
void pack_queries(const AttnProblem& p, const AttnSeq& s, const AttnItem& w, Scratch& sc) {
  const int D = p.head_dim, G = p.num_q_heads / p.num_kv_heads;
  float* q = sc.q.get(size_t(kMaxRows) * D);
  const float q_scale = p.scale * kLog2e;  // scores in log2 units: exp2 is cheaper than exp
  for (int r = 0; r < item_rows(w); ++r) {
    const float* src = p.q + (s.q_start + item_token(w, r)) * p.q_stride_t + int64_t(item_q_head(w, r, G)) * p.q_stride_h;
    float* dst = q + int64_t(r) * D;
    for (int d = 0; d < D; ++d) dst[d] = src[d] * q_scale;
  }
}

// Final rows of an item from o ([rows, o_stride]): o / l into out, or (m, l, o) into a
// partial slot.
void finish_item(const AttnProblem& p, const AttnSeq& s, const AttnItem& w, const Scratch& sc, const float* o,
                 int o_stride, float* partials) {
  const int D = p.head_dim, G = p.num_q_heads / p.num_kv_heads;
  for (int r = 0; r < item_rows(w); ++r) {
    const float* src = o + int64_t(r) * o_stride;
    if (w.partial >= 0) {
      float* dst = partials + w.partial + int64_t(r) * (D + 2);
      dst[0] = sc.m[r];
      dst[1] = sc.l[r];
      std::memcpy(dst + 2, src, sizeof(float) * D);
      continue;
    }
    float* dst = p.out + ((s.q_start + item_token(w, r)) * p.num_q_heads + item_q_head(w, r, G)) * int64_t(D);
    const float inv = sc.l[r] > 0.0f ? 1.0f / sc.l[r] : 0.0f;
    for (int d = 0; d < D; ++d) dst[d] = src[d] * inv;
  }
}

// ---- scalar path: any head dim ------------------------------------------------------------

void run_item_scalar(const AttnProblem& p, const AttnItem& w, Scratch& sc, float* partials) {
  const AttnSeq& s = p.seqs[w.seq];
  const int D = p.head_dim, rows = item_rows(w), rph = item_rows_per_head(w);
  pack_queries(p, s, w, sc);
  const float* q = sc.q.get(0);
  float* o = sc.o.get(size_t(kMaxRows) * D);
  int kend = w.k0;
  for (int r = 0; r < rows; ++r) {
    sc.lim[r] = row_limit(p, s, w, item_token(w, r));
    if (sc.lim[r] > kend) kend = sc.lim[r];
    sc.m[r] = kNegInf;
    sc.l[r] = 0.0f;
  }
  std::memset(o, 0, sizeof(float) * size_t(rows) * D);
  for (int j0 = w.k0; j0 < kend; j0 += kTileKeys) {
    const int n = kend - j0 < kTileKeys ? kend - j0 : kTileKeys;
    key_rows(p, s, j0, n, sc.rows);
    for (int r = 0; r < rows; ++r) {
      if (r % rph == 0) gather_tile(p, sc.rows, item_kv_head(w, r), n, sc);
      const float* qr = q + int64_t(r) * D;
      float* orow = o + int64_t(r) * D;
      const int count = (sc.lim[r] < j0 + n ? sc.lim[r] : j0 + n) - j0;
      for (int jj = 0; jj < count; ++jj) {
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += qr[d] * sc.k_rows[jj][d];
        const float m_new = sc.m[r] > dot ? sc.m[r] : dot;
        const float alpha = std::exp2(sc.m[r] - m_new), pr = std::exp2(dot - m_new);
        sc.m[r] = m_new;
        sc.l[r] = sc.l[r] * alpha + pr;
        for (int d = 0; d < D; ++d) orow[d] = orow[d] * alpha + pr * sc.v_rows[jj][d];
      }
    }
  }
  finish_item(p, s, w, sc, o, D, partials);
}

// ---- tiled path: head dims that are multiples of 8 up to 128 -------------------------------

// Keys j0..j0+kLanes (zeros past n) by dims d0..d0+dn, transposed into kt: dn = kLanes, or
// 8 for the half block that ends a row when D % 16 == 8 on AVX-512 (kPartial).
template <bool kPartial>
[[gnu::always_inline]] inline void transpose_block(const float* const* k_rows, int n, int j0, int d0, int dn, float* kt) {
  Vec r[kLanes];
  for (int i = 0; i < kLanes; ++i) {
    const int j = j0 + i;
    r[i] = j >= n ? zero() : kPartial ? load_n(k_rows[j] + d0, dn) : load(k_rows[j] + d0);
  }
  transpose(r);
  for (int c = 0; c < (kPartial ? dn : kLanes); ++c) store_aligned(kt + (d0 + c) * kTileKeys + j0, r[c]);
}

// kt: [D, 64] from the n (<= 64) gathered key rows; keys past n are 0.
void pack_keys_transposed(const float* const* k_rows, int n, int D, float* kt) {
  const int groups = (n + kLanes - 1) / kLanes, whole = D / kLanes * kLanes;
  for (int kg = 0; kg < kTileVecs; ++kg) {
    const int j0 = kg * kLanes;
    if (kg >= groups) {
      for (int d = 0; d < D; ++d) store_aligned(kt + d * kTileKeys + j0, zero());
      continue;
    }
    for (int d0 = 0; d0 < whole; d0 += kLanes) transpose_block<false>(k_rows, n, j0, d0, kLanes, kt);
    if (whole < D) transpose_block<true>(k_rows, n, j0, whole, D - whole, kt);
  }
}

// s[RQ, slab] = q[RQ, D] . kt[D, slab] for one slab of kQkSlabKeys keys (kt and s point at
// its first key): a register block of RQ rows x kQkVecs key vectors.
template <int RQ>
void qk_block(const float* q, int D, const float* kt, float* s, Prefetcher& pf) {
  Vec acc[RQ][kQkVecs];
  for (int i = 0; i < RQ; ++i)
    for (int v = 0; v < kQkVecs; ++v) acc[i][v] = zero();
  for (int d = 0; d < D; ++d) {
    const float* ktd = kt + d * kTileKeys;
    pf.step();
    pf.step();
    Vec k[kQkVecs];
    for (int v = 0; v < kQkVecs; ++v) k[v] = load_aligned(ktd + v * kLanes);
    for (int i = 0; i < RQ; ++i) {
      const Vec b = splat(q[i * D + d]);
      for (int v = 0; v < kQkVecs; ++v) acc[i][v] = fma(b, k[v], acc[i][v]);
    }
  }
  for (int i = 0; i < RQ; ++i)
    for (int v = 0; v < kQkVecs; ++v) store_aligned(s + i * kTileKeys + v * kLanes, acc[i][v]);
}

template <int RQ>
void qk_tail(int rem, const float* q, int D, const float* kt, float* s, Prefetcher& pf) {
  if constexpr (RQ > 0) {
    if (rem == RQ) return qk_block<RQ>(q, D, kt, s, pf);
    qk_tail<RQ - 1>(rem, q, D, kt, s, pf);
  }
}

// s[rows, 64] = q[rows, D] . kt[D, 64] for the slabs that hold the tile's n keys (scores of
// keys past n are never read).
void qk_tile(int rows, const float* q, int D, const float* kt, int n, float* s, Prefetcher& pf) {
  const int slab_end = (n + kQkSlabKeys - 1) / kQkSlabKeys * kQkSlabKeys;
  int r = 0;
  for (; r + kQkRows <= rows; r += kQkRows)
    for (int j = 0; j < slab_end; j += kQkSlabKeys) qk_block<kQkRows>(q + r * D, D, kt + j, s + r * kTileKeys + j, pf);
  for (int j = 0; j < slab_end; j += kQkSlabKeys)
    qk_tail<kQkRows - 1>(rows - r, q + r * D, D, kt + j, s + r * kTileKeys + j, pf);
}

// Online-softmax update of a tile's rows (see the NOTE at the top): for row r with count[r]
// valid keys, m' = max(m, tile max), alpha = 2^(m - m'), p = 2^(s - m') in place (0 past
// count) and l_vec = l_vec * alpha + p. l is kept as kLanes lane-wise partial sums per row
// (l_vec, [rows, kLanes]) so that no horizontal sum is needed per tile.
void softmax_tile(int rows, float* s, const int* count, float* m, float* alpha, float* l_vec) {
  float m_tile[kMaxRows];
  for (int r = 0; r < rows; ++r) {
    Vec mx = splat(kNegInf);
    for (int v = 0; v * kLanes < count[r]; ++v)
      mx = select(first_n(count[r] - v * kLanes), max(mx, load_aligned(s + r * kTileKeys + v * kLanes)), mx);
    m_tile[r] = count[r] > 0 ? reduce_max(mx) : kNegInf;
  }
  // New maxima and rescale factors, kLanes rows at a time. A row that has still seen no key
  // (m' = -inf) keeps alpha = 1 rather than 2^(-inf + inf).
  for (int r = 0; r < rows; r += kLanes) {
    const int live = rows - r;
    const Vec mo = load_n(m + r, live);
    const Vec mn = max(mo, load_n(m_tile + r, live));
    const Vec a = select(mn == splat(kNegInf), splat(1.0f), exp2_nonpositive(mo - mn));
    store_n(m + r, mn, live);
    store_n(alpha + r, a, live);
  }
  for (int r = 0; r < rows; ++r) {
    float* sr = s + r * kTileKeys;
    float* lr = l_vec + r * kLanes;
    if (count[r] <= 0) {
      for (int v = 0; v < kTileVecs; ++v) store_aligned(sr + v * kLanes, zero());
      continue;
    }
    const Vec mv = splat(m[r]);
    Vec l = zero();
    for (int v = 0; v < kTileVecs; ++v) {
      const int c = clamp_lanes(count[r] - kLanes * v);
      Vec pv = zero();
      if (c > 0) pv = zero_unless(first_n(c), exp2_nonpositive(load_aligned(sr + v * kLanes) - mv));
      store_aligned(sr + v * kLanes, pv);
      // l * alpha + the first vector in one rounding (an FMA), then the others added.
      l = v == 0 ? fma(load_aligned(lr), splat(alpha[r]), pv) : l + pv;
    }
    store_aligned(lr, l);
  }
}

// Offset of vector v of a P V block of CV vectors whose last one holds kLast valid lanes.
// A row that ends in half a vector (kLast < kLanes: D % 16 == 8 on AVX-512) has its last
// vector moved back to end at the row's end, overlapping its neighbour: the shared lanes are
// computed twice the same way and stored twice with the same value, and the inner loop has
// no masked load (with one, GCC kept a memory copy of the accumulators, 2x slower). A row of
// one half vector (D = 8) uses the masked load.
template <int CV, int kLast>
constexpr int column(int v) {
  return kLast < kLanes && CV > 1 && v == CV - 1 ? v * kLanes - (kLanes - kLast) : v * kLanes;
}

// o[RQ, cols] = o * alpha + p[RQ, :n] . v[:n, cols] for the CV vectors of columns from col
// (o rows o_stride apart, padded to whole vectors).
template <int RQ, int CV, int kLast>
void pv_block(const float* p, const float* const* v_rows, int n, const float* alpha, float* o, int o_stride, int col,
              Prefetcher& pf) {
  constexpr bool kMasked = kLast < kLanes && CV == 1;
  Vec acc[RQ][CV];
  for (int i = 0; i < RQ; ++i) {
    const Vec a = splat(alpha[i]);
    for (int v = 0; v < CV; ++v) acc[i][v] = load(o + i * o_stride + col + column<CV, kLast>(v)) * a;
  }
  for (int j = 0; j < n; ++j) {
    const float* vr = v_rows[j] + col;
    pf.step();
    pf.step();
    Vec pb[RQ];
    for (int i = 0; i < RQ; ++i) pb[i] = splat(p[i * kTileKeys + j]);
    for (int v = 0; v < CV; ++v) {
      const Vec vv = kMasked ? load_n(vr, kLast) : load(vr + column<CV, kLast>(v));
      for (int i = 0; i < RQ; ++i) acc[i][v] = fma(pb[i], vv, acc[i][v]);
    }
  }
  for (int i = 0; i < RQ; ++i)
    for (int v = 0; v < CV; ++v) store(o + i * o_stride + col + column<CV, kLast>(v), acc[i][v]);
}

template <int CV, int kLast, int RQ>
void pv_tail(int rem, const float* p, const float* const* v_rows, int n, const float* alpha, float* o, int o_stride,
             int col, Prefetcher& pf) {
  if constexpr (RQ > 0) {
    if (rem == RQ) return pv_block<RQ, CV, kLast>(p, v_rows, n, alpha, o, o_stride, col, pf);
    pv_tail<CV, kLast, RQ - 1>(rem, p, v_rows, n, alpha, o, o_stride, col, pf);
  }
}

// Every row, the CV vectors of columns from col.
template <int CV, int kLast>
void pv_columns(int rows, const float* p, const float* const* v_rows, int n, const float* alpha, float* o,
                int o_stride, int col, Prefetcher& pf) {
  constexpr int kRq = pv_rows_for(CV);
  int r = 0;
  for (; r + kRq <= rows; r += kRq)
    pv_block<kRq, CV, kLast>(p + r * kTileKeys, v_rows, n, alpha + r, o + r * o_stride, o_stride, col, pf);
  pv_tail<CV, kLast, kRq - 1>(rows - r, p + r * kTileKeys, v_rows, n, alpha + r, o + r * o_stride, o_stride, col, pf);
}

// o[rows, D] = o * alpha + p . v for D = kLanes * (DV - 1) + kLast, o rows DV * kLanes apart:
// column blocks of kPvCols vectors, the last one (1..kPvCols vectors) ending in the tail.
template <int DV, int kLast>
void pv_tile(int rows, const float* p, const float* const* v_rows, int n, const float* alpha, float* o, Prefetcher& pf) {
  constexpr int kStride = DV * kLanes, kFull = (DV - 1) / kPvCols, kRest = DV - kFull * kPvCols;
  for (int c = 0; c < kFull; ++c) pv_columns<kPvCols, kLanes>(rows, p, v_rows, n, alpha, o, kStride, c * kPvCols * kLanes, pf);
  pv_columns<kRest, kLast>(rows, p, v_rows, n, alpha, o, kStride, kFull * kPvCols * kLanes, pf);
}

using PvTileFn = void (*)(int, const float*, const float* const*, int, const float*, float*, Prefetcher&);

template <int D>
constexpr PvTileFn pv_tile_for() {
  constexpr int dv = (D + kLanes - 1) / kLanes;
  return pv_tile<dv, D - (dv - 1) * kLanes>;
}

// By head dim / 8.
constexpr PvTileFn kPvTiles[kMaxTiledDim / 8 + 1] = {
    nullptr,             pv_tile_for<8>(),   pv_tile_for<16>(),  pv_tile_for<24>(),  pv_tile_for<32>(),
    pv_tile_for<40>(),   pv_tile_for<48>(),  pv_tile_for<56>(),  pv_tile_for<64>(),  pv_tile_for<72>(),
    pv_tile_for<80>(),   pv_tile_for<88>(),  pv_tile_for<96>(),  pv_tile_for<104>(), pv_tile_for<112>(),
    pv_tile_for<120>(),  pv_tile_for<128>()};

bool tiled(int head_dim) { return head_dim % 8 == 0 && head_dim >= 8 && head_dim <= kMaxTiledDim; }

void run_item_tiled(const AttnProblem& p, const AttnItem& w, Scratch& sc, float* partials) {
  const AttnSeq& s = p.seqs[w.seq];
  const int D = p.head_dim, rows = item_rows(w), rph = item_rows_per_head(w);
  const int o_stride = (D + kLanes - 1) / kLanes * kLanes;
  pack_queries(p, s, w, sc);
  const float* q = sc.q.get(0);
  float* kt = sc.kt.get(size_t(D) * kTileKeys);
  float* st = sc.s.get(size_t(kMaxRows) * kTileKeys);
  float* o = sc.o.get(size_t(kMaxRows) * o_stride);
  float* l_vec = sc.l_vec.get(size_t(kMaxRows) * kLanes);
  int kend = w.k0;
  for (int r = 0; r < rows; ++r) {
    sc.lim[r] = row_limit(p, s, w, item_token(w, r));
    if (sc.lim[r] > kend) kend = sc.lim[r];
    sc.m[r] = kNegInf;
  }
  std::memset(o, 0, sizeof(float) * size_t(rows) * o_stride);
  std::memset(l_vec, 0, sizeof(float) * size_t(rows) * kLanes);
  const PvTileFn pv = kPvTiles[D / 8];
  key_rows(p, s, w.k0, kend - w.k0 < kTileKeys ? kend - w.k0 : kTileKeys, sc.next_rows);
  for (int j0 = w.k0; j0 < kend; j0 += kTileKeys) {
    const int n = kend - j0 < kTileKeys ? kend - j0 : kTileKeys;
    const int left = kend - j0 - n, n_next = left < kTileKeys ? left : kTileKeys;
    std::memcpy(sc.rows, sc.next_rows, sizeof(int64_t) * n);
    if (n_next > 0) key_rows(p, s, j0 + n, n_next, sc.next_rows);
    for (int r0 = 0; r0 < rows; r0 += rph) {  // one kv head's rows at a time
      // Two (tile, head) steps ahead: this tile's later heads, then the next tile's first.
      const int ahead = r0 / rph + (w.nh < 2 ? w.nh : 2);
      // Contiguous K/V stream through the hardware prefetcher on their own.
      if (p.block_size == 0) sc.prefetch.stop();
      else if (ahead < w.nh) sc.prefetch.start(p, sc.rows, w.h0 + ahead, n);
      else if (n_next > 0) sc.prefetch.start(p, sc.next_rows, w.h0 + ahead - w.nh, n_next);
      else sc.prefetch.stop();
      gather_tile(p, sc.rows, item_kv_head(w, r0), n, sc);
      pack_keys_transposed(sc.k_rows, n, D, kt);
      qk_tile(rph, q + int64_t(r0) * D, D, kt, n, st, sc.prefetch);
      for (int r = r0; r < r0 + rph; ++r) sc.count[r] = (sc.lim[r] < j0 + n ? sc.lim[r] : j0 + n) - j0;
      softmax_tile(rph, st, sc.count + r0, sc.m + r0, sc.alpha + r0, l_vec + r0 * kLanes);
      pv(rph, st, sc.v_rows, n, sc.alpha + r0, o + int64_t(r0) * o_stride, sc.prefetch);
    }
  }
  for (int r = 0; r < rows; ++r) sc.l[r] = reduce_add(load_aligned(l_vec + r * kLanes));
  finish_item(p, s, w, sc, o, o_stride, partials);
}

void run_item(const AttnProblem& p, const AttnItem& w, float* partials) {
  Scratch& sc = scratch();
  if (tiled(p.head_dim)) return run_item_tiled(p, w, sc, partials);
  run_item_scalar(p, w, sc, partials);
}

}  // namespace

extern const AttentionTileKernels kAttentionTileKernels = {
    .run_item = run_item,
    .tiled = tiled,
};

}  // namespace prism::cpu::PRISM_TIER

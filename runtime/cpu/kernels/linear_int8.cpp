// runtime/cpu/kernels/linear_int8.cpp: the int8 linear of linear_int8.h for one tier (compiled
// once per tier): s8 x s8 dot products with AVX2 integer instructions, exact in int32, and the
// f32 epilogue fused per tile. Must not: allocate once warm (scratch is thread-local and only
// grows), start threads beyond the OpenMP pool, or instantiate a function with external linkage
// that another tier's copy of this file would define too (tier_scratch.h says why): so no
// Result, std::shared_ptr or ScratchBuffer here (scratch is TierScratch); Int8Kernels::pack
// (runtime/cpu/linear_int8.cpp, baseline) owns the memory and the errors.
//
// NOTE (layout): weights [N, K] s8 become groups of 8 output columns x 4 consecutive k (one
// 32-byte ymm: [n_padded / 8][k_padded / 4][8][4], column-major inside a quad), each group's
// quads back to back, zero-padded in K (to 4) and N (to 8). The same on every tier: the AVX-512
// tiers run the same 256-bit code (see the NOTE on AVX-512 at the end of the file).
//
// NOTE (arithmetic): vpmaddubsw multiplies an unsigned by a signed byte, and both operands are
// signed, so each x quad is applied as |x| (u8) against sign(w, x) (_mm256_sign_epi8: w
// negated where x < 0, zeroed where x = 0). Pair sums are at most 2 * 128 * 127 = 32512 < 2^15
// (x may even be -128; w must stay in [-127, 127] or its negation wraps), so vpmaddubsw never
// saturates; vpmaddwd with ones widens pairs to int32. Sums stay exact while K * 128 * 127 <
// 2^31 (pack rejects K > kInt8MaxK). x is converted once per call into interleaved int32 pairs
// (|x| quad, x quad) so that a broadcast per row and quad is one load each.
//
// NOTE (blocking): a tile is RM rows x NB groups (8 NB columns) over a range of quads, its
// RM * NB int32 accumulators in registers (16 ymm on AVX2: RM * NB + NB + 4 <= 16; 32 under
// AVX-512VL, where only vpsignb's operands must sit in the low 16). Per quad it loads NB
// weight vectors and 2 RM broadcasts for 4 RM NB integer ops.
//  - Up to kMaxSingleTileRows rows (decode): every row in one tile, K in one pass: each
//    weight byte is read exactly once, threads own contiguous column ranges (a stream each).
//  - More rows (prefill): blocks of <= kRowBlock rows x <= kPrefillGroups groups per task;
//    inside a task K runs in chunks of kChunkQuads quads (8-12 KiB of weights per group step,
//    re-read from L1 by every row tile), int32 partial sums in a thread-local tile (L2), and
//    the epilogue runs on the finished tile while it is hot.
//
// NOTE (speed): bench/linear_int8_bench, shared 2-core Zen 4, one thread timed by its CPU clock,
// SmolLM2-360M and Llama-3.2-1B shapes, f32 = oneDNN's f32 matmul on the same tier and run.
//  - avx2, prefill (M = 64, 512): 101-137 GOP/s, 1.20-3.0x f32 (44-100 GFLOP/s). oneDNN's s8
//    matmul (saturating, see linear_int8.h) 35-160 GOP/s.
//  - avx2, decode: M = 1: 13-21 GB/s of weights (the read bandwidth, 18-22 GB/s), 3.1-5.9x f32's
//    speed; M = 2: 4.5-7.9x; M = 4: 3.1-5.3x; M = 8: 2.0-2.9x (compute-bound: ~0.47 ns per
//    32-MAC tile step with the weights in L2). oneDNN's s8 gemm repacks B per call: 0.3-1.2 GB/s.
//  - avx512 (no VNNI): the same code, 1.08-1.39x f32 in prefill (oneDNN's saturating s8: 1.6-2.1x),
//    decode 2.0-6.2x f32 (oneDNN's s8: 1.0-2.4x).
//  - avx512_bf16 (VNNI): oneDNN's vpdpbusd matmul is exact there and 3.5-4.2x f32 in prefill.
// Tried and dropped: software prefetch of the weight streams 1-4 KiB ahead (T0 or T1): no gain at
// M = 4 and 8, 10-25% slower at M = 1 (the hardware prefetcher already keeps up).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/kernels/tier_scratch.h"
#include "runtime/cpu/kernels/vec_math.h"
#include "runtime/cpu/linear_int8.h"

namespace prism::cpu::PRISM_TIER {
namespace {

constexpr int64_t kGroupCols = 8;     // output columns per group (one ymm of int32)
constexpr int64_t kQuadBytes = 32;    // one k quad of one group
constexpr int64_t kChunkQuads = 128;  // 512 k per K chunk in prefill tiles
constexpr int64_t kQuadsPerUnit = 8;  // x conversion unit: 32 bytes of one row

#if defined(__AVX512F__)
// 32 registers (256-bit EVEX code may use ymm16-31).
constexpr int kMaxSingleTileRows = 8;
constexpr int kTileRows = 6, kTileGroups = 3;  // prefill: 18 accumulators
constexpr int kMaxTileRowsTable = 8, kMaxTileGroupsTable = 4;
// Groups per tile for a single tile of r rows (index r): r NB + NB + 4 <= 32.
constexpr int kSingleTileGroups[kMaxSingleTileRows + 1] = {0, 4, 4, 4, 4, 4, 3, 3, 3};
#else
constexpr int kMaxSingleTileRows = 8;
constexpr int kTileRows = 4, kTileGroups = 2;  // prefill: 8 accumulators, 10 loads / 8 tiles
constexpr int kMaxTileRowsTable = 8, kMaxTileGroupsTable = 4;
// r NB + NB + 4 <= 16.
constexpr int kSingleTileGroups[kMaxSingleTileRows + 1] = {0, 4, 4, 3, 2, 2, 1, 1, 1};
#endif
constexpr int64_t kRowBlock = 16 * kTileRows;  // rows per prefill task
constexpr int64_t kPrefillGroups = 32;         // groups (256 columns) per prefill task
constexpr int64_t kMaxDecodeGroups = 64;       // groups per decode task (bounds the tile)
static_assert(kTileRows <= kMaxTileRowsTable && kTileGroups <= kMaxTileGroupsTable);

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- tiles ----

// c[RM rows][8 NB] (int32, row stride ldc) (+)= the dot products over nq quads of RM rows of
// x pairs (row stride x_stride int32, quad q at 2 q: |x| then x) with NB groups of weights
// (group stride gs bytes, 32 bytes a quad). init: start from 0 instead of c.
template <int RM, int NB>
void tile(const int32_t* xp, int64_t x_stride, const int8_t* w, int64_t gs, int64_t nq, int32_t* c, int64_t ldc,
          bool init) {
  if (init)
    for (int r = 0; r < RM; ++r) std::memset(c + r * ldc, 0, size_t(NB * kGroupCols) * sizeof(int32_t));
  __m256i acc[RM][NB];
  for (int r = 0; r < RM; ++r)
    for (int i = 0; i < NB; ++i)
      acc[r][i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + r * ldc + i * kGroupCols));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t q = 0; q < nq; ++q) {
    __m256i wv[NB];
    for (int i = 0; i < NB; ++i)
      wv[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + i * gs + q * kQuadBytes));
    for (int r = 0; r < RM; ++r) {
      const __m256i xa = _mm256_set1_epi32(xp[r * x_stride + 2 * q]);
      const __m256i xs = _mm256_set1_epi32(xp[r * x_stride + 2 * q + 1]);
      for (int i = 0; i < NB; ++i) {
        const __m256i p = _mm256_maddubs_epi16(xa, _mm256_sign_epi8(wv[i], xs));
        acc[r][i] = _mm256_add_epi32(acc[r][i], _mm256_madd_epi16(p, ones));
      }
    }
  }
  for (int r = 0; r < RM; ++r)
    for (int i = 0; i < NB; ++i)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc + i * kGroupCols), acc[r][i]);
}

using TileFn = void (*)(const int32_t*, int64_t, const int8_t*, int64_t, int64_t, int32_t*, int64_t, bool);

template <int RM, int... NB>
constexpr std::array<TileFn, sizeof...(NB)> tiles_for_rows(std::integer_sequence<int, NB...>) {
  return {tile<RM, NB + 1>...};
}
template <int... RM>
constexpr auto make_tiles(std::integer_sequence<int, RM...>) {
  return std::array<std::array<TileFn, kMaxTileGroupsTable>, sizeof...(RM)>{
      tiles_for_rows<RM + 1>(std::make_integer_sequence<int, kMaxTileGroupsTable>())...};
}
// kTiles[RM - 1][NB - 1]
constexpr auto kTiles = make_tiles(std::make_integer_sequence<int, kMaxTileRowsTable>());

// ---- epilogue: y = act(sx[m] * (float(acc) * sw[n]) + b[n]) ----

#if defined(__AVX512F__)
inline Vec load_i32_as_float(const int32_t* p) { return {_mm512_cvtepi32_ps(_mm512_loadu_si512(p))}; }
#else
inline Vec load_i32_as_float(const int32_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
#endif

// One value per lane: z = sx * t + b with one rounding (fma), or sx * t; then the activation.
template <ops::Activation kAct, bool kBias>
inline Vec finish(Vec s, Vec t, const float* bias, int64_t cnt) {
  const Vec z = kBias ? fma(s, t, cnt >= kLanes ? load(bias) : load_n(bias, cnt)) : s * t;
  return activate(z, kAct);
}

// y[r, col0 + j] for r < rows, j < ncols, from the int32 tile c (row stride ldc, columns
// readable up to a multiple of kLanes): t = float(c) * sw.
template <ops::Activation kAct, bool kBias>
void epilogue_tile(const int32_t* c, int64_t ldc, int64_t rows, const float* sx, int64_t col0, int64_t ncols,
                   const float* sw, const float* bias, float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const Vec s = splat(sx[r]);
    float* yr = y + r * ldy + col0;
    for (int64_t j = 0; j < ncols; j += kLanes) {
      const int64_t cnt = ncols - j;
      const Vec t = load_i32_as_float(c + r * ldc + j) * (cnt >= kLanes ? load(sw + col0 + j) : load_n(sw + col0 + j, cnt));
      const Vec v = finish<kAct, kBias>(s, t, bias ? bias + col0 + j : nullptr, cnt);
      if (cnt >= kLanes)
        store(yr + j, v);
      else
        store_n(yr + j, v, cnt);
    }
  }
}

// The same on y in place, where y already holds t (oneDNN's per-N output scales).
template <ops::Activation kAct, bool kBias>
void epilogue_in_place(float* y, int64_t rows, int64_t n, const float* sx, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    const Vec s = splat(sx[r]);
    float* yr = y + r * n;
    for (int64_t j = 0; j < n; j += kLanes) {
      const int64_t cnt = n - j;
      const Vec t = cnt >= kLanes ? load(yr + j) : load_n(yr + j, cnt);
      const Vec v = finish<kAct, kBias>(s, t, bias ? bias + j : nullptr, cnt);
      if (cnt >= kLanes)
        store(yr + j, v);
      else
        store_n(yr + j, v, cnt);
    }
  }
}

using EpilogueTileFn = void (*)(const int32_t*, int64_t, int64_t, const float*, int64_t, int64_t, const float*,
                                const float*, float*, int64_t);
using EpilogueInPlaceFn = void (*)(float*, int64_t, int64_t, const float*, const float*);

template <ops::Activation kAct>
constexpr std::array<EpilogueTileFn, 2> tile_epilogues() {
  return {epilogue_tile<kAct, false>, epilogue_tile<kAct, true>};
}
template <ops::Activation kAct>
constexpr std::array<EpilogueInPlaceFn, 2> in_place_epilogues() {
  return {epilogue_in_place<kAct, false>, epilogue_in_place<kAct, true>};
}

EpilogueTileFn tile_epilogue(ops::Activation act, bool bias) {
  using A = ops::Activation;
  switch (act) {
    case A::none: return tile_epilogues<A::none>()[bias];
    case A::relu: return tile_epilogues<A::relu>()[bias];
    case A::gelu_erf: return tile_epilogues<A::gelu_erf>()[bias];
    case A::gelu_tanh: return tile_epilogues<A::gelu_tanh>()[bias];
    case A::silu: return tile_epilogues<A::silu>()[bias];
    case A::quick_gelu: return tile_epilogues<A::quick_gelu>()[bias];
  }
  PRISM_CHECK_MSG(false, "linear_int8: unknown activation");
  return nullptr;
}

EpilogueInPlaceFn in_place_epilogue(ops::Activation act, bool bias) {
  using A = ops::Activation;
  switch (act) {
    case A::none: return in_place_epilogues<A::none>()[bias];
    case A::relu: return in_place_epilogues<A::relu>()[bias];
    case A::gelu_erf: return in_place_epilogues<A::gelu_erf>()[bias];
    case A::gelu_tanh: return in_place_epilogues<A::gelu_tanh>()[bias];
    case A::silu: return in_place_epilogues<A::silu>()[bias];
    case A::quick_gelu: return in_place_epilogues<A::quick_gelu>()[bias];
  }
  PRISM_CHECK_MSG(false, "linear_int8: unknown activation");
  return nullptr;
}

// ---- x conversion ----

// Units [u0, u1) of kQuadsPerUnit quads (32 bytes of one row; units_per_row a row) of x [rows,
// k] into pairs xp (row stride x_stride int32): (|x| quad, x quad), zero past k.
void convert_x(const int8_t* x, int64_t k, int64_t units_per_row, int64_t x_stride, int64_t u0, int64_t u1,
               int32_t* xp) {
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t r = u / units_per_row, k0 = (u % units_per_row) * 4 * kQuadsPerUnit;
    __m256i v;
    if (k - k0 >= 32) {
      v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * k + k0));
    } else {
      alignas(32) int8_t tail[32] = {};
      std::memcpy(tail, x + r * k + k0, size_t(k - k0));
      v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    }
    const __m256i a = _mm256_abs_epi8(v);
    const __m256i lo = _mm256_unpacklo_epi32(a, v);  // quads 0, 1 | 4, 5
    const __m256i hi = _mm256_unpackhi_epi32(a, v);  // quads 2, 3 | 6, 7
    __m256i* out = reinterpret_cast<__m256i*>(xp + r * x_stride + 2 * (k0 / 4));
    _mm256_store_si256(out, _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_store_si256(out + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// ---- gemm ----

struct Plan {
  int64_t row_blocks, col_blocks;
  int64_t rows_per_block, groups_per_block;
};

// Tasks for nt threads: decode sizes get contiguous, balanced column ranges (a multiple of nt
// blocks); prefill gets blocks of kRowBlock x kPrefillGroups, enough of them to balance.
Plan plan(int64_t rows, int64_t groups, int64_t nt) {
  Plan p;
  if (rows <= kMaxSingleTileRows) {
    p.row_blocks = 1;
    p.rows_per_block = rows;
    p.col_blocks = std::min(groups, nt * ceil_div(groups, nt * kMaxDecodeGroups));
  } else {
    p.row_blocks = ceil_div(rows, kRowBlock);
    p.rows_per_block = ceil_div(rows, p.row_blocks);
    p.col_blocks = ceil_div(groups, kPrefillGroups);
    // Few blocks: cut columns finer so every thread gets a near-equal share.
    if (p.row_blocks * p.col_blocks < 4 * nt)
      p.col_blocks = std::min(groups, std::max(p.col_blocks, ceil_div(4 * nt, p.row_blocks)));
  }
  p.groups_per_block = ceil_div(groups, p.col_blocks);
  p.col_blocks = ceil_div(groups, p.groups_per_block);
  return p;
}

// One task: rows [r0, r1) x groups [g0, g1) into y.
void run_block(const int32_t* xp, int64_t x_stride, const Int8Weights& w, int64_t r0, int64_t r1, int64_t g0,
               int64_t g1, const float* sx, const float* bias, EpilogueTileFn epilogue, int32_t* c, int64_t ldc,
               float* y) {
  const int64_t kq = w.k_padded / 4, gs = kq * kQuadBytes;
  const int64_t rows = r1 - r0;
  const int8_t* wg = w.data + g0 * gs;
  if (rows <= kMaxSingleTileRows) {
    const int nb = kSingleTileGroups[rows];
    for (int64_t g = 0; g < g1 - g0; g += nb) {
      const int n = int(std::min<int64_t>(nb, g1 - g0 - g));
      kTiles[rows - 1][n - 1](xp + r0 * x_stride, x_stride, wg + g * gs, gs, kq, c + g * kGroupCols, ldc, true);
    }
  } else {
    const int64_t num_tiles = ceil_div(rows, kTileRows);
    for (int64_t q0 = 0; q0 < kq; q0 += kChunkQuads) {
      const int64_t nq = std::min(kChunkQuads, kq - q0);
      for (int64_t g = 0; g < g1 - g0; g += kTileGroups) {
        const int n = int(std::min<int64_t>(kTileGroups, g1 - g0 - g));
        for (int64_t t = 0, r = 0; t < num_tiles; ++t) {
          const int64_t rm = rows / num_tiles + (t < rows % num_tiles ? 1 : 0);
          kTiles[rm - 1][n - 1](xp + (r0 + r) * x_stride + 2 * q0, x_stride, wg + g * gs + q0 * kQuadBytes, gs, nq,
                                c + r * ldc + g * kGroupCols, ldc, q0 == 0);
          r += rm;
        }
      }
    }
  }
  const int64_t col0 = g0 * kGroupCols;
  const int64_t ncols = std::min(w.n, g1 * kGroupCols) - col0;
  if (ncols > 0) epilogue(c, ldc, rows, sx + r0, col0, ncols, w.scales, bias, y + r0 * w.n, w.n);
}

void gemm(const int8_t* xq, int64_t rows, const float* sx, const Int8Weights& w, const float* bias,
          ops::Activation act, float* y) {
  if (rows <= 0) return;
  thread_local TierScratch x_scratch;
  const int64_t kq = w.k_padded / 4, groups = w.n_padded / kGroupCols;
  const int64_t units_per_row = ceil_div(kq, kQuadsPerUnit);
  const int64_t x_stride = units_per_row * kQuadsPerUnit * 2;  // int32 per row
  int32_t* xp = static_cast<int32_t*>(x_scratch.get(size_t(rows * x_stride) * sizeof(int32_t)));
  const EpilogueTileFn epilogue = tile_epilogue(act, bias != nullptr);
  // Below ~128 KiB of weights (decode) or ~2 M multiply-adds per thread the fork-join costs
  // more than it saves.
  const int64_t weight_bytes = w.n_padded * w.k_padded;
  const int64_t want = std::max(weight_bytes / (128 << 10), rows * weight_bytes / (2 << 20));
  const int threads = int(std::clamp<int64_t>(want, 1, omp_get_max_threads()));

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t units = rows * units_per_row;
    convert_x(xq, w.k, units_per_row, x_stride, units * t / nt, units * (t + 1) / nt, xp);
#pragma omp barrier
    const Plan p = plan(rows, groups, nt);
    thread_local TierScratch c_scratch;
    // Columns of the int32 tile rounded up to whole vectors of the epilogue.
    const int64_t ldc = ceil_div(p.groups_per_block * kGroupCols, kLanes) * kLanes;
    int32_t* c = static_cast<int32_t*>(c_scratch.get(size_t(p.rows_per_block * ldc) * sizeof(int32_t)));
    const int64_t tasks = p.row_blocks * p.col_blocks;
    // Consecutive tasks share a column block: its weights stay in this core's L2.
    for (int64_t task = tasks * t / nt, end = tasks * (t + 1) / nt; task < end; ++task) {
      const int64_t cb = task / p.row_blocks, rb = task % p.row_blocks;
      const int64_t r0 = rows * rb / p.row_blocks, r1 = rows * (rb + 1) / p.row_blocks;
      const int64_t g0 = cb * p.groups_per_block, g1 = std::min(groups, g0 + p.groups_per_block);
      run_block(xp, x_stride, w, r0, r1, g0, g1, sx, bias, epilogue, c, ldc, y);
    }
  }
}

void epilogue(float* y, int64_t rows, int64_t n, const float* sx, const float* bias, ops::Activation act) {
  const EpilogueInPlaceFn fn = in_place_epilogue(act, bias != nullptr);
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1));
  const int threads = int(std::clamp<int64_t>(rows / grain, 1, omp_get_max_threads()));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    if (r1 > r0) fn(y + r0 * n, r1 - r0, n, sx + r0, bias);
  }
}

// ---- pack ----

Int8Layout layout(int64_t n, int64_t k) {
  Int8Layout l;
  l.n_padded = ceil_div(n, kGroupCols) * kGroupCols;
  l.k_padded = ceil_div(k, 4) * 4;
  l.scales_offset = size_t(ceil_div(l.n_padded * l.k_padded, 64) * 64);
  l.bytes = l.scales_offset + size_t(l.n_padded) * sizeof(float);
  return l;
}

void pack_into(const int8_t* q, const float* scales, int64_t n, int64_t k, void* out) {
  const Int8Layout l = layout(n, k);
  int8_t* dst = static_cast<int8_t*>(out);
  float* sw = reinterpret_cast<float*>(dst + l.scales_offset);
  const int64_t kq = l.k_padded / 4;
  for (int64_t g = 0; g < l.n_padded / kGroupCols; ++g)
    for (int64_t qd = 0; qd < kq; ++qd) {
      int8_t* quad = dst + (g * kq + qd) * kQuadBytes;
      for (int64_t col = 0; col < kGroupCols; ++col)
        for (int64_t j = 0; j < 4; ++j) {
          const int64_t nn = g * kGroupCols + col, kk = qd * 4 + j;
          quad[col * 4 + j] = nn < n && kk < k ? q[nn * k + kk] : int8_t(0);
        }
    }
  for (int64_t i = 0; i < l.n_padded; ++i) sw[i] = i < n ? scales[i] : 0.0f;
}

}  // namespace

// NOTE (AVX-512): the avx512 and avx512_bf16 copies run the same 256-bit instructions (there is
// no 512-bit vpsignb; a masked subtract would do) with larger tiles, since EVEX code has 32
// registers. On Zen 4, which executes 512-bit integer ops as two 256-bit halves, 512-bit
// vectors would not raise the multiply rate.
extern const Int8Kernels kInt8Kernels = {
    .pack = pack_int8,  // baseline (runtime/cpu/linear_int8.cpp), around layout and pack_into
    .gemm = gemm,
    .epilogue = epilogue,
    .layout = layout,
    .pack_into = pack_into,
};

}  // namespace prism::cpu::PRISM_TIER

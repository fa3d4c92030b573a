// runtime/cpu/kernels/linear_bf16_dot.cpp: Bf16DotKernels (linear_kernels.h): the bf16 linear
// for decode-sized M, streaming oneDNN's packed weights once with _mm512_dpbf16_ps. Only the
// AVX512_BF16 tier has it (the table entry is null on the others). Must not: copy or repack
// weights, allocate per call once warm, or start threads beyond the OpenMP pool.
//
// NOTE (why): at M = 1..8 a linear reads K * N * 2 bytes of weights for 2 * M * K * N flops,
// so it is bound by memory bandwidth. At M = 1 oneDNN 2.6's brgemm streams them at 81-88%
// of the rate of this kernel (bench/linear_bench decode: "bf16 onednn" vs "bf16
// onednn_dpbf16", same weights, same run; figures below). This kernel keeps the weights in oneDNN's layout (linear_kernels.h) and makes the
// weight stream the only memory traffic: each 64-byte load of weights (one k pair of 16
// columns) feeds one dpbf16 per row.
//
// Work: columns are cut into 16-column panels, a contiguous range of panels per thread (the
// thread then streams its own region of every 64-column group); a tile is up to 4 adjacent
// panels of one group x up to 6 rows (24 accumulators + 4 weight vectors + a broadcast of the
// row's bf16 pair: 29 of 32 registers). More than 6 rows run as several row tiles over
// K chunks small enough (16 KiB of weights) to be re-read from L1 by the next row tile.
// x is converted once per call to bf16 pairs (int32: x[2p] low, x[2p + 1] high, zero past K)
// inside the same parallel region, so a call costs one fork-join.
//
// NOTE (threshold, kSmallMMaxRows = 8): measured on the shared 2-core Zen 4 with
// `linear_bench small_m 1` (today `linear_bench decode 1`: one thread, timed by its CPU
// clock, because the wall clock of a 2-thread run there mostly measured the neighbours),
// weights GB/s, ours vs oneDNN, at the
// SmolLM2-360M and Llama-3.2-1B shapes (960->2560 ... 2048->128256):
//   M = 1: 1.14-1.24x (22.8-34.4 GB/s vs 19.8-29.4)   M = 2: 1.13-1.28x
//   M = 4: 0.95-1.22x                                   M = 8: 1.02-1.10x
//   M = 16: 0.84-0.95x (compute-bound; oneDNN's brgemm wins), so 16 rows stay on oneDNN.
// Two threads, wall clock, in a quieter window (read bandwidth 50-59 GB/s), as a fraction
// of the read bandwidth, ours / oneDNN: M = 1: 75-97% / 69-90% (Llama-3.2-1B shapes 85-97%,
// SmolLM2 2560->960, 4.9 MB of weights, 75%); M = 2 and 4: 68-92% / 64-83%; M = 8: 54-64% /
// 52-65% (a wash); M = 16: 38-44% / 41-51%.
#include <omp.h>

#include <algorithm>
#include <array>

#include "base/check.h"
#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/kernels/vec_math.h"
#include "runtime/cpu/linear_kernels.h"
#include "runtime/cpu/kernels/tier_scratch.h"

namespace prism::cpu::PRISM_TIER {

#if defined(__AVX512BF16__)

namespace {

constexpr int64_t kPairElems = 128;   // bf16 of one k pair across a 64-column group
constexpr int kPanelElems = 32;       // bf16 of one k pair across a 16-column panel
constexpr int kMaxTileRows = 6;
constexpr int kMaxRows = int(kBf16DotMaxRows);  // rows of the accumulator scratch
constexpr int64_t kChunkPairs = 64;   // 64 pairs x 256 B = 16 KiB of a group: L1-resident
// NOTE: no software prefetch. Each thread streams its panels sequentially, which the
// hardware prefetcher follows; measured on one thread (linear_bench, thread CPU clock, same
// run), prefetching 8/16/32/64 k pairs ahead was 10-30% slower than none at M = 1 (e.g.
// 2048->8192: 37.3 GB/s without, 26-31 with; oneDNN 27.1) and no better at M = 4.
static_assert(kSmallMMaxRows <= kMaxRows);

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// acc[RM][16 * NB] (row stride 64 floats) += x[RM pairs p0..p1) . w[pairs p0..p1, NB panels];
// init: start from 0 instead of acc. x: int32 bf16 pairs, row stride x_stride; w: the tile's
// first panel at pair 0, pairs kPairElems apart.
template <int RM, int NB>
void tile_kernel(const int32_t* x, int64_t x_stride, const bf16* w, int64_t p0, int64_t p1, float* acc, bool init) {
  __m512 c[RM][NB];
  for (int r = 0; r < RM; ++r)
    for (int i = 0; i < NB; ++i) c[r][i] = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + r * 64 + i * 16);
  const bf16* wp = w + p0 * kPairElems;
  for (int64_t p = p0; p < p1; ++p, wp += kPairElems) {
    __m512bh wv[NB];
    for (int i = 0; i < NB; ++i) wv[i] = as_bh(_mm512_loadu_si512(wp + i * kPanelElems));
    for (int r = 0; r < RM; ++r) {
      const __m512bh xb = as_bh(_mm512_set1_epi32(x[r * x_stride + p]));
      for (int i = 0; i < NB; ++i) c[r][i] = _mm512_dpbf16_ps(c[r][i], xb, wv[i]);
    }
  }
  for (int r = 0; r < RM; ++r)
    for (int i = 0; i < NB; ++i) _mm512_store_ps(acc + r * 64 + i * 16, c[r][i]);
}

using TileFn = void (*)(const int32_t*, int64_t, const bf16*, int64_t, int64_t, float*, bool);

template <int RM>
constexpr std::array<TileFn, 4> tiles_for_rows() {
  return {tile_kernel<RM, 1>, tile_kernel<RM, 2>, tile_kernel<RM, 3>, tile_kernel<RM, 4>};
}
constexpr std::array<std::array<TileFn, 4>, kMaxTileRows> kTiles = {
    tiles_for_rows<1>(), tiles_for_rows<2>(), tiles_for_rows<3>(),
    tiles_for_rows<4>(), tiles_for_rows<5>(), tiles_for_rows<6>()};

// acc[rows][16 * nb] for nb panels over all K: one tile when the rows fit, else balanced row
// tiles over L1-sized K chunks.
void panel_tile(const int32_t* x, int64_t x_stride, int64_t rows, const bf16* w, int64_t k_pairs, int nb, float* acc) {
  if (rows <= kMaxTileRows) {
    kTiles[rows - 1][nb - 1](x, x_stride, w, 0, k_pairs, acc, true);
    return;
  }
  const int64_t num_tiles = (rows + kMaxTileRows - 1) / kMaxTileRows;
  for (int64_t p0 = 0; p0 < k_pairs; p0 += kChunkPairs) {
    const int64_t p1 = std::min(k_pairs, p0 + kChunkPairs);
    for (int64_t t = 0, r0 = 0; t < num_tiles; ++t) {
      const int64_t rm = rows / num_tiles + (t < rows % num_tiles ? 1 : 0);
      kTiles[rm - 1][nb - 1](x + r0 * x_stride, x_stride, w, p0, p1, acc + r0 * 64, p0 == 0);
      r0 += rm;
    }
  }
}

// y[:, col0 .. col0 + 16 nb) = act(acc + bias), columns past n masked off.
void store_tile(const float* acc, int64_t rows, int nb, int64_t col0, int64_t n, const float* bias, ops::Activation act,
                float* y) {
  for (int i = 0; i < nb; ++i) {
    const int64_t col = col0 + 16 * i;
    if (col >= n) break;
    const __mmask16 mask = n - col >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - col)) - 1u);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + col) : _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      const __m512 v = _mm512_add_ps(_mm512_load_ps(acc + r * 64 + i * 16), b);
      _mm512_mask_storeu_ps(y + r * n + col, mask, activate(Vec{v}, act).v);
    }
  }
}

// Pairs [c0 * 16, c1 * 16) of every row of x (flattened chunks of 16 pairs) into xb.
void convert_chunks(const float* x, int64_t ld, int64_t k, int64_t x_stride, int64_t chunks_per_row, int64_t c0,
                    int64_t c1, int32_t* xb) {
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t r = c / chunks_per_row, k0 = (c % chunks_per_row) * 32;
    const float* src = x + r * ld + k0;
    const int64_t left = k - k0;
    const __mmask16 lo = left >= 16 ? __mmask16(0xffff) : left > 0 ? __mmask16((1u << left) - 1u) : __mmask16(0);
    const __mmask16 hi = left >= 32 ? __mmask16(0xffff) : left > 16 ? __mmask16((1u << (left - 16)) - 1u) : __mmask16(0);
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + 16), _mm512_maskz_loadu_ps(lo, src));
    _mm512_store_si512(xb + r * x_stride + k0 / 2, reinterpret_cast<const __m512i&>(v));
  }
}

void small_m_linear_bf16(const float* x, int64_t rows, int64_t ld, const Bf16PanelWeights& w, const float* bias,
                         ops::Activation act, float* y) {
  PRISM_CHECK_MSG(rows >= 1 && rows <= kMaxRows, "small_m_linear_bf16: rows out of range");
  thread_local TierScratch x_scratch;
  const int64_t x_stride = (w.k_pairs + 15) / 16 * 16;  // int32 pairs per row, whole chunks
  const int64_t chunks_per_row = x_stride / 16;
  int32_t* xb = static_cast<int32_t*>(x_scratch.get(size_t(rows * x_stride) * sizeof(int32_t)));
  const int64_t panels = (w.n + 15) / 16;
  // Below ~128 KiB of weights per thread the fork-join costs more than it saves.
  const int64_t weight_bytes = panels * 16 * w.k_pairs * 4;
  const int threads = int(std::clamp<int64_t>(weight_bytes / (128 << 10), 1, omp_get_max_threads()));

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunks = rows * chunks_per_row;
    convert_chunks(x, ld, w.k, x_stride, chunks_per_row, chunks * t / nt, chunks * (t + 1) / nt, xb);
#pragma omp barrier
    alignas(64) float acc[kMaxRows * 64];
    const int64_t end = panels * (t + 1) / nt;
    for (int64_t pan = panels * t / nt; pan < end;) {
      const int64_t group = pan / 4, first = pan % 4;
      const int nb = int(std::min<int64_t>(4 - first, end - pan));
      panel_tile(xb, x_stride, rows, w.data + group * w.group_stride + first * kPanelElems, w.k_pairs, nb, acc);
      store_tile(acc, rows, nb, pan * 16, w.n, bias, act, y);
      pan += nb;
    }
  }
}

}  // namespace

#endif  // __AVX512BF16__

extern const Bf16DotKernels kBf16DotKernels = {
#if defined(__AVX512BF16__)
    .small_m = small_m_linear_bf16,
#else
    .small_m = nullptr,
#endif
};

}  // namespace prism::cpu::PRISM_TIER

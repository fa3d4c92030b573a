// runtime/cpu/kernels/linear_bf16_widen.cpp: Bf16WidenKernels (linear_kernels.h) for one tier:
// y = act(x @ W^T + b) with W bf16 in Prism's panel layout, widened to f32 in registers, x and
// the accumulation f32. One kernel family for every M: decode streams the weights once at
// memory speed, prefill is a cache-blocked GEMM. Must not: allocate per call once warm, or
// start threads beyond the OpenMP pool.
//
// NOTE (numerics): a bf16 -> f32 widening is exact, so every product is x * w with w the
// packed bf16 weight exactly and x the caller's f32 exactly; the only error is the f32
// accumulation over K (in K order within a K block; blocks summed through y in order),
// |err| <= ~K 2^-24 sum_k |x_k w_k|, then the bias add and the activation.
//
// NOTE (micro-kernel): a tile is RM <= 6 rows x NB panels of P = 2 kLanes columns, its 2 RM NB
// accumulators in registers; per k it takes the panels' P weights as two f32 vectors,
// broadcasts x[r][k] and issues 2 RM NB FMAs. NB (panels_for_rows) is as large as the
// registers allow for few rows, so that decode has >= 8 independent FMA chains and several
// weight streams in flight: AVX2 (16 registers) 6x1 (12 accumulators + 2 weights + a
// broadcast, the classic 6x16 f32 shape), 3x2, 2x3, 1x4; AVX-512 (32) 6x2 down to 1x4. (A
// 12x1 AVX-512 tile was 10% slower at M = 512 than 6x2, and one panel per tile with k-split
// accumulators slower at M = 1 than four concurrent panel streams.) The weights come either
// straight from the bf16 panels, widened in registers (load_bf16_pairs: a shift and a mask,
// no shuffle), or from an f32 copy of the current K chunk of the panel ("widened first").
// Activations are packed per block as [k][rows] per tile (thread-local), so the broadcasts
// read one contiguous stream whatever the row stride (strides of 4 KiB multiples would
// otherwise map every row of a tile to the same L1 set).
//
// NOTE (which weights, measured on Zen 4 with one thread, PRISM_ISA=avx2): the shift of the
// in-register widening competes with the FMAs for the two FMA pipes: at 512 x 2048 -> 2048
// the 6x16 tile ran at 76 GFLOP/s on bf16 panels, 85 with the shift replaced by a mask (wrong
// values, for timing), and the same with the chunk widened once to f32 and shared by the
// block's tiles (oneDNN f32: 85-90). Widening first costs a pass over each chunk and serialises
// its memory reads with the compute, which decode cannot hide: at M = 8 (two 4-row tiles)
// widening first ran at 40-47 GFLOP/s, in-register at 52-69 (oneDNN f32 27-35). So blocks
// of one or two tiles (M <= 12) widen in registers, larger blocks widen first
// (kMinTilesToWiden), with the next chunk software-prefetched: chunks of different panels
// are 2 K P bytes apart, too far for the hardware prefetcher.
//
// NOTE (blocking and threads): rows are cut into balanced tiles, threads into a grid of row
// groups x panel groups (split_threads: the least work per thread, ties to more panel
// groups, so that each weight byte is read by one thread). Each thread takes its row tiles in
// blocks of kBlockTiles tiles (192 rows: the weights are streamed once per block) and packs
// the block's activations; then
//  - one tile (M <= 6, decode): NB panels at a time over the whole K in registers. Each
//    panel is read front to back, once: the weight stream is the only memory traffic.
//  - several tiles, activations in L2 (kL2ActivationBytes): panel by panel (NB at a time),
//    K in chunks of kKcWidened, every tile of the block over the chunk while it sits in L1.
//  - else (large M and K): groups of kNcPanels panels, K chunks outside the panels, so the
//    group's outputs stay in L2 across K chunks and each weight chunk in L1/L2 across the
//    block's tiles (GotoBLAS's order, with our panels as the packed B).
// Partial sums cross K chunks through y; bias and activation are applied to the whole tile on
// the last chunk's store (activate_vectors).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/kernels/tier_scratch.h"
#include "runtime/cpu/kernels/vec_math.h"
#include "runtime/cpu/linear_kernels.h"

namespace prism::cpu::PRISM_TIER {
namespace {

constexpr int kP = 2 * kLanes;  // columns per panel
constexpr int kMaxTileRows = 6;
constexpr int kBlockTiles = 32;  // 192 rows
#if defined(__AVX512F__)
constexpr int kNcPanels = 16;  // 512 columns: 192 x 512 x 4 = 384 KiB of outputs (L2)
#else
constexpr int kNcPanels = 32;  // 512 columns
#endif
constexpr int kMaxNb = 4;
// K chunk of a block of several tiles: 512 k (AVX2) / 256 k (AVX-512); one panel's chunk
// widened to f32 is 32 KiB, streamed from L1/L2 by each tile (16 KiB chunks were up to 10%
// slower at M = 512, from the extra partial-sum round trips through y).
constexpr int64_t kKcWidened = 8192 / kP;
constexpr int64_t kL2ActivationBytes = 256 << 10;
constexpr int64_t kMinTilesToWiden = 3;  // blocks of fewer tiles widen in registers

// Panels per tile for rm rows: 2 rm nb accumulators + 2 weight vectors + a broadcast must
// fit the registers (16 / 32), and rm = 1 still needs 8 independent chains.
constexpr int panels_for_rows(int rm) {
#if defined(__AVX512F__)
  return rm <= 3 ? 4 : 2;
#else
  return rm == 1 ? 4 : rm == 2 ? 3 : rm == 3 ? 2 : 1;
#endif
}

struct TileArgs {
  const float* xp;       // the tile's packed activations at the chunk's first k: [kc][RM]
  const bf16* w;         // the tile's first panel at the chunk's first k (bf16 tiles), or
  const float* wf;       // the chunk widened to f32, [nb][kKcWidened][P] (widened tiles)
  int64_t panel_stride;  // elements from one panel to the next (K * P; kKcWidened * P)
  int64_t kc;            // k rows in the chunk
  float* y;              // output at (the tile's first row, the first panel's first column)
  int64_t ldy;           // output row stride (N)
  int64_t cols;          // valid columns from there (may be more than NB * P)
  bool init;             // first K chunk: no partial sum in y yet
  bool finish;           // last K chunk: add the bias, apply the activation
  const float* bias;     // at the first column, or null
  ops::Activation act;
};

// v[0, n) = act(v) in place, the activation fixed at compile time and four independent vectors
// per step: each vector's activation is one long dependency chain (GELU's erf ~35 ops, a
// divide on AVX2), so a tile's vectors one at a time would leave the core idle. Measured at
// 4096 x 768 -> 3072 + GELU(erf) on AVX2 (one thread): 60 -> 68-74 GFLOP/s (no activation:
// 85-90; oneDNN f32 with its own fused GELU: 84-88). The rest is vec_math's erf GELU itself:
// ~17 ns per 8 lanes on one Zen 4 core in a tight loop, 12% of this GEMM's time at K = 768.
template <ops::Activation kAct>
void activate_vectors_as(float* v, int n) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const Vec a0 = activate(load_aligned(v + (j + 0) * kLanes), kAct);
    const Vec a1 = activate(load_aligned(v + (j + 1) * kLanes), kAct);
    const Vec a2 = activate(load_aligned(v + (j + 2) * kLanes), kAct);
    const Vec a3 = activate(load_aligned(v + (j + 3) * kLanes), kAct);
    store_aligned(v + (j + 0) * kLanes, a0);
    store_aligned(v + (j + 1) * kLanes, a1);
    store_aligned(v + (j + 2) * kLanes, a2);
    store_aligned(v + (j + 3) * kLanes, a3);
  }
  for (; j < n; ++j) store_aligned(v + j * kLanes, activate(load_aligned(v + j * kLanes), kAct));
}

void activate_vectors(float* v, int n, ops::Activation act) {
  using A = ops::Activation;
  switch (act) {
    case A::none: return;
    case A::relu: return activate_vectors_as<A::relu>(v, n);
    case A::gelu_erf: return activate_vectors_as<A::gelu_erf>(v, n);
    case A::gelu_tanh: return activate_vectors_as<A::gelu_tanh>(v, n);
    case A::silu: return activate_vectors_as<A::silu>(v, n);
    case A::quick_gelu: return activate_vectors_as<A::quick_gelu>(v, n);
  }
}

// y (+)= the tile's accumulators; on the last K chunk, + bias and the activation. Columns at
// or past a.cols are not touched.
template <int RM, int NB>
inline void store_tile(Vec (&c)[RM][NB][2], const TileArgs& a) {
  if (!a.finish && a.cols >= NB * kP) {  // a partial sum of whole panels: the common case
    for (int r = 0; r < RM; ++r)
      for (int i = 0; i < NB; ++i)
        for (int h = 0; h < 2; ++h) {
          float* out = a.y + r * a.ldy + i * kP + h * kLanes;
          store(out, a.init ? c[r][i][h] : c[r][i][h] + load(out));
        }
    return;
  }
  // The tile's final values (partial sum, bias), activated together in a buffer, then stored.
  alignas(64) float buf[RM * NB * 2 * kLanes];
  for (int i = 0; i < NB; ++i)
    for (int h = 0; h < 2; ++h) {
      const int64_t col = i * kP + h * kLanes;
      const int64_t cnt = std::min<int64_t>(a.cols - col, kLanes);
      if (cnt <= 0) break;  // columns only grow from here
      const Vec b = a.finish && a.bias ? load_n(a.bias + col, cnt) : zero();
      for (int r = 0; r < RM; ++r) {
        const float* out = a.y + r * a.ldy + col;
        Vec v = c[r][i][h] + b;
        if (!a.init) v = v + (cnt == kLanes ? load(out) : load_n(out, cnt));
        store_aligned(buf + ((r * NB + i) * 2 + h) * kLanes, v);
      }
    }
  if (a.finish) activate_vectors(buf, RM * NB * 2, a.act);
  for (int i = 0; i < NB; ++i)
    for (int h = 0; h < 2; ++h) {
      const int64_t col = i * kP + h * kLanes;
      const int64_t cnt = std::min<int64_t>(a.cols - col, kLanes);
      if (cnt <= 0) return;
      for (int r = 0; r < RM; ++r) {
        float* out = a.y + r * a.ldy + col;
        const Vec v = load_aligned(buf + ((r * NB + i) * 2 + h) * kLanes);
        if (cnt == kLanes)
          store(out, v);
        else
          store_n(out, v, cnt);
      }
    }
}

// kWidened: the weights come from the f32 chunk (a.wf), else straight from the bf16 panels.
template <int RM, int NB, bool kWidened>
void tile_kernel(const TileArgs& a) {
  Vec c[RM][NB][2];
  for (int r = 0; r < RM; ++r)
    for (int i = 0; i < NB; ++i) c[r][i][0] = c[r][i][1] = zero();
  const float* xp = a.xp;
  const bf16* w = a.w;
  const float* wf = a.wf;
#if !defined(__AVX512F__)
#pragma GCC unroll 4  // on AVX-512 (24 accumulators of 32 registers) GCC 12 then copies registers
#endif
  for (int64_t k = 0; k < a.kc; ++k, xp += RM, w += kP, wf += kP) {
    for (int i = 0; i < NB; ++i) {
      Vec lo, hi;
      if constexpr (kWidened) {
        lo = load_aligned(wf + i * a.panel_stride);
        hi = load_aligned(wf + i * a.panel_stride + kLanes);
      } else {
        load_bf16_pairs(w + i * a.panel_stride, lo, hi);
      }
      for (int r = 0; r < RM; ++r) {
        const Vec xr = splat(xp[r]);
        c[r][i][0] = fma(xr, lo, c[r][i][0]);
        c[r][i][1] = fma(xr, hi, c[r][i][1]);
      }
    }
  }
  store_tile<RM, NB>(c, a);
}

using TileFn = void (*)(const TileArgs&);

template <int RM, int NB, bool kWidened>
constexpr TileFn tile_or_null() {
  if constexpr (NB <= panels_for_rows(RM))
    return tile_kernel<RM, NB, kWidened>;
  else
    return nullptr;
}
template <int RM, bool kWidened>
constexpr std::array<TileFn, kMaxNb> tiles_for_rows() {
  return {tile_or_null<RM, 1, kWidened>(), tile_or_null<RM, 2, kWidened>(), tile_or_null<RM, 3, kWidened>(),
          tile_or_null<RM, 4, kWidened>()};
}
template <bool kWidened, size_t... R>
constexpr std::array<std::array<TileFn, kMaxNb>, sizeof...(R)> make_tiles(std::index_sequence<R...>) {
  return {tiles_for_rows<int(R) + 1, kWidened>()...};
}
// kTiles[rm - 1][nb - 1]: bf16 straight from the panels; kWidenedTiles: from a widened chunk.
constexpr auto kTiles = make_tiles<false>(std::make_index_sequence<kMaxTileRows>());
constexpr auto kWidenedTiles = make_tiles<true>(std::make_index_sequence<kMaxTileRows>());

// Panels [0, nb) of w (panel_stride apart), k rows [0, kk), widened into wf [nb][kKcWidened][P]
// with columns in order.
void widen_chunk(const bf16* w, int64_t panel_stride, int nb, int64_t kk, float* wf) {
  for (int i = 0; i < nb; ++i) {
    const bf16* src = w + i * panel_stride;
    float* dst = wf + i * kKcWidened * kP;
    for (int64_t k = 0; k < kk; ++k) {
      Vec lo, hi;
      load_bf16_pairs(src + k * kP, lo, hi);
      store_aligned(dst + k * kP, lo);
      store_aligned(dst + k * kP + kLanes, hi);
    }
  }
}

// Rows cut into num_tiles balanced tiles.
struct RowTiling {
  int64_t rows, num_tiles, base, extra;
  explicit RowTiling(int64_t m)
      : rows(m), num_tiles((m + kMaxTileRows - 1) / kMaxTileRows), base(m / num_tiles), extra(m % num_tiles) {}
  int64_t start(int64_t t) const { return t * base + std::min(t, extra); }
  int size(int64_t t) const { return int(base + (t < extra ? 1 : 0)); }
};

// Threads as row groups x panel groups: the least work (tiles x panels) on the busiest
// thread; ties go to more panel groups (each weight byte read by one thread only).
std::pair<int, int> split_threads(int nt, int64_t tiles, int64_t panels) {
  int best_tr = 1, best_tc = nt;
  int64_t best = -1;
  for (int tc = nt; tc >= 1; --tc) {
    if (nt % tc != 0) continue;
    const int tr = nt / tc;
    const int64_t work = ((tiles + tr - 1) / tr) * ((panels + tc - 1) / tc);
    if (best < 0 || work < best) {
      best = work;
      best_tr = tr;
      best_tc = tc;
    }
  }
  return {best_tr, best_tc};
}

// Rows of tiles [t0, t1) as [k][rm] per tile, tile t at xp + (start(t) - start(t0)) * k.
void pack_rows(const float* x, int64_t ld, int64_t k, const RowTiling& tiling, int64_t t0, int64_t t1, float* xp) {
  const int64_t first = tiling.start(t0);
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t row0 = tiling.start(t);
    const int rm = tiling.size(t);
    float* dst = xp + (row0 - first) * k;
    if (rm == 1) {
      std::memcpy(dst, x + row0 * ld, size_t(k) * sizeof(float));
      continue;
    }
    // kLanes columns at a time: the rows as vectors (zeros below rm), transposed, and each
    // column's first rm lanes stored in increasing order (a store's lanes past rm are
    // overwritten by the next; the scratch has kLanes floats of slack for the last one).
    const float* src = x + row0 * ld;
    int64_t j = 0;
    for (; j + kLanes <= k; j += kLanes) {
      Vec v[kLanes];
      for (int r = 0; r < kLanes; ++r) v[r] = r < rm ? load(src + r * ld + j) : zero();
      transpose(v);
      for (int c = 0; c < kLanes; ++c) store(dst + (j + c) * rm, v[c]);
    }
    for (; j < k; ++j)
      for (int r = 0; r < rm; ++r) dst[j * rm + r] = src[r * ld + j];
  }
}

// One thread's share: tiles [t0, t1) x panels [p0, p1).
void gemm_share(const float* x, int64_t ld, const Bf16WidenWeights& w, const float* bias, ops::Activation act,
                float* y, const RowTiling& tiling, int64_t t0, int64_t t1, int64_t p0, int64_t p1) {
  if (t0 >= t1 || p0 >= p1) return;
  thread_local TierScratch scratch, widened;
  const int64_t K = w.k, N = w.n;
  const int64_t panel_stride = K * kP;
  for (int64_t b0 = t0; b0 < t1; b0 += kBlockTiles) {
    const int64_t b1 = std::min(t1, b0 + kBlockTiles);
    const int64_t row0 = tiling.start(b0), block_rows = tiling.start(b1) - row0;
    float* xp = static_cast<float*>(scratch.get(size_t(block_rows * K + kLanes) * sizeof(float)));
    pack_rows(x, ld, K, tiling, b0, b1, xp);
    int max_rm = 0;
    for (int64_t t = b0; t < b1; ++t) max_rm = std::max(max_rm, tiling.size(t));
    // One tile: the whole K in registers, weights straight from the panels. Several: K in
    // chunks, each panel's chunk widened once and shared by the block's tiles.
    const bool one_tile = b1 - b0 == 1;
    const int nb_step = panels_for_rows(max_rm);
    const bool widen_first = b1 - b0 >= kMinTilesToWiden;
    const int64_t kc = one_tile ? K : kKcWidened;
    float* wf =
        widen_first ? static_cast<float*>(widened.get(size_t(nb_step * kKcWidened * kP) * sizeof(float))) : nullptr;
    const bool panel_major = one_tile || block_rows * K * int64_t(sizeof(float)) <= kL2ActivationBytes;
    const int64_t nc = panel_major ? nb_step : std::max<int64_t>(nb_step, kNcPanels / nb_step * nb_step);
    for (int64_t jc = p0; jc < p1; jc += nc) {
      const int64_t je = std::min(p1, jc + nc);
      for (int64_t pc = 0; pc < K; pc += kc) {
        const int64_t kk = std::min(kc, K - pc);
        for (int64_t jr = jc; jr < je; jr += nb_step) {
          const int nb = int(std::min<int64_t>(nb_step, je - jr));
          if (wf) {
            widen_chunk(w.data + jr * panel_stride + pc * kP, panel_stride, nb, kk, wf);
            // The next chunk to widen into L2 while the tiles run on this one: chunks of
            // different panels are 2 K P bytes apart, too far for the hardware prefetcher.
            const int64_t next_jr = jr + nb_step < je ? jr + nb_step : jc;
            const int64_t next_pc = jr + nb_step < je ? pc : pc + kc;
            if (next_pc < K) {
              const int64_t next_kk = std::min(kc, K - next_pc);
              const int next_nb = int(std::min<int64_t>(nb_step, je - next_jr));
              for (int i = 0; i < next_nb; ++i) {
                const char* p = reinterpret_cast<const char*>(w.data + (next_jr + i) * panel_stride + next_pc * kP);
                for (int64_t off = 0; off < next_kk * kP * int64_t(sizeof(bf16)); off += 64) __builtin_prefetch(p + off, 0, 2);
              }
            }
          }
          for (int64_t t = b0; t < b1; ++t) {
            const int rm = tiling.size(t);
            const int64_t r = tiling.start(t);
            TileArgs a;
            a.xp = xp + (r - row0) * K + pc * rm;
            a.w = w.data + jr * panel_stride + pc * kP;
            a.wf = wf;
            a.panel_stride = wf ? kKcWidened * kP : panel_stride;
            a.kc = kk;
            a.y = y + r * N + jr * kP;
            a.ldy = N;
            a.cols = N - jr * kP;
            a.init = pc == 0;
            a.finish = pc + kk == K;
            a.bias = bias ? bias + jr * kP : nullptr;
            a.act = act;
            (wf ? kWidenedTiles : kTiles)[rm - 1][nb - 1](a);
          }
        }
      }
    }
  }
}

void gemm(const float* x, int64_t rows, int64_t ld, const Bf16WidenWeights& w, const float* bias, ops::Activation act,
          float* y) {
  PRISM_CHECK_MSG(w.panel_width == kP, "bf16 widen gemm: weights packed for another tier");
  PRISM_CHECK_MSG(rows >= 1, "bf16 widen gemm: no rows");
  const RowTiling tiling(rows);
  // Below ~128 KiB of weights or ~4 MFLOP per thread the fork-join costs more than it saves.
  const int64_t weight_bytes = w.panels * w.k * kP * int64_t(sizeof(bf16));
  const int64_t flops = 2 * rows * w.k * w.n;
  const int64_t want = std::max(weight_bytes / (128 << 10), flops / (4 << 20));
  const int threads = int(std::clamp<int64_t>(want, 1, omp_get_max_threads()));
  const auto [tr, tc] = split_threads(threads, tiling.num_tiles, w.panels);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    // The grid is for `threads`; a smaller team (nested parallelism off, a busy pool) runs
    // its cells in turn.
    for (int64_t cell = t; cell < int64_t(tr) * tc; cell += nt) {
      const int64_t g = cell / tc, c = cell % tc;
      gemm_share(x, ld, w, bias, act, y, tiling, tiling.num_tiles * g / tr, tiling.num_tiles * (g + 1) / tr,
                 w.panels * c / tc, w.panels * (c + 1) / tc);
    }
  }
}

}  // namespace

extern const Bf16WidenKernels kBf16WidenKernels = {
    .panel_width = kP,
    .gemm = gemm,
};

}  // namespace prism::cpu::PRISM_TIER

// runtime/cpu/attention_tile.h: the per-tier half of the attention kernel. attention_kernel.cpp
// (baseline) plans work items (sequence, query tokens, kv heads, key range), splits long key
// ranges and merges the parts; runtime/cpu/kernels/attention_tile.cpp (compiled once per tier)
// computes one item: queries packed, K/V rows gathered and converted, keys transposed into a
// tile, S = Q K^T, the online-softmax update and P V in register blocks sized for the tier.
// Must not: hold inline functions with external linkage (the tiers' copies could be merged by
// the linker); the row helpers below are static, one copy per file that uses them.
#pragma once

#include <cstdint>

#include "runtime/cpu/attention_kernel.h"
#include "runtime/cpu/tier_table.h"

namespace prism::cpu {

inline constexpr int kAttnTileKeys = 64;  // keys per tile
inline constexpr int kAttnMaxRows = 64;   // query rows (token x q head) per item

// A work item: query tokens t0..t0+nt of a sequence, for kv heads h0..h0+nh and, of each,
// the q heads h * G + g0..g0+ng, against keys [k0, k1). Row r of the item is kv head
// h0 + r / (nt * ng), then token t0 + (r % (nt * ng)) / ng, then q head g0 + r % ng.
// Decode items take several kv heads so that each tile reads whole cache blocks (all heads
// of a token are adjacent) instead of 512-byte rows 4 KiB apart.
struct AttnItem {
  int seq = 0;
  int h0 = 0, nh = 1;
  int t0 = 0, nt = 0;
  int g0 = 0, ng = 0;
  int k0 = 0, k1 = 0;
  int64_t partial = -1;  // -1: writes out; else offset (floats) of its rows * (D + 2) partials
  int64_t cost = 0;
};

static inline int item_rows_per_head(const AttnItem& w) { return w.nt * w.ng; }
static inline int item_rows(const AttnItem& w) { return w.nh * w.nt * w.ng; }
static inline int item_token(const AttnItem& w, int r) { return w.t0 + (r % item_rows_per_head(w)) / w.ng; }
static inline int item_kv_head(const AttnItem& w, int r) { return w.h0 + r / item_rows_per_head(w); }
static inline int item_q_head(const AttnItem& w, int r, int group) { return item_kv_head(w, r) * group + w.g0 + r % w.ng; }

struct AttentionTileKernels {
  // Computes item w of p: its rows of p.out (o / l; 0 for a row with no key), or, when
  // w.partial >= 0, (m, l, o) per row at partials + w.partial + r * (D + 2), with m the
  // row's largest score in log2 units (-inf: no key), l the sum of 2^(s - m), o unnormalised.
  void (*run_item)(const AttnProblem& p, const AttnItem& w, float* partials);
  // Whether head_dim takes the tiled path (else run_item's scalar path: any head dim).
  bool (*tiled)(int head_dim);
};

PRISM_TIER_TABLES(AttentionTileKernels, kAttentionTileKernels)

inline const AttentionTileKernels& attention_tile_kernels() {
  static const AttentionTileKernels& k =
      tier_table(avx2::kAttentionTileKernels, avx512::kAttentionTileKernels, avx512_bf16::kAttentionTileKernels);
  return k;
}

}  // namespace prism::cpu

// runtime/cpu/attention_kernel.cpp: flash-style attention, the baseline half: cuts the work
// into items of (sequence, block of query tokens, kv heads, the q heads sharing each kv head),
// splits long key ranges when there are too few items for the threads, hands the items to the
// active tier's kernel (runtime/cpu/kernels/attention_tile.cpp: tiles of 64 keys, online
// softmax, register blocks per tier) in an OpenMP loop and merges the split parts. No vector
// code here: this file is compiled for the baseline.
// It must not allocate per call once warm, nor start threads beyond the OpenMP pool.
//
// NOTE: flash-decoding. Each part of a split item keeps its own (m, l, o) per row (m the
// largest score in log2 units, l the sum of 2^(s - m), o the unnormalised output);
// merge_group rescales every part to the largest m, exactly as the kernel does across tiles,
// and divides once.
#include "runtime/cpu/attention_kernel.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"
#include "runtime/cpu/attention_tile.h"
#include "runtime/cpu/scratch_buffer.h"

namespace prism::cpu {
namespace {

constexpr int kTileKeys = kAttnTileKeys;
constexpr int kMaxRows = kAttnMaxRows;
constexpr int kMinSplitKeys = 256;  // a flash-decoding split never has fewer keys
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A split item's parts, merged after the parallel loop.
struct MergeGroup {
  AttnItem item;      // k range: the whole item
  int64_t first = 0;  // offset of the first part's partial rows
  int num_parts = 0;  // parts lie back to back, each rows * (D + 2) floats
};

// Combines the parts of a split item: the same rescaling as across tiles. The weighted sums
// are explicit FMAs: whether a compiler fuses them must not depend on -mtune (the pre-tier
// -march=native build on Zen 4 did not fuse l's, generic tuning does).
void merge_group(const AttnProblem& p, const MergeGroup& g, const float* partials) {
  const AttnSeq& s = p.seqs[g.item.seq];
  const int D = p.head_dim, G = p.num_q_heads / p.num_kv_heads;
  const int rows = item_rows(g.item);
  const int64_t part_floats = int64_t(rows) * (D + 2);
  for (int r = 0; r < rows; ++r) {
    float m = kNegInf;
    for (int c = 0; c < g.num_parts; ++c) m = std::max(m, partials[g.first + c * part_floats + r * (D + 2)]);
    float* dst = p.out + ((s.q_start + item_token(g.item, r)) * p.num_q_heads + item_q_head(g.item, r, G)) * int64_t(D);
    std::fill(dst, dst + D, 0.0f);
    if (m == kNegInf) continue;  // no part saw a key
    float l = 0.0f;
    for (int c = 0; c < g.num_parts; ++c) {
      const float* part = partials + g.first + c * part_floats + r * (D + 2);
      const float wgt = std::exp2(part[0] - m);
      l = std::fma(wgt, part[1], l);
      for (int d = 0; d < D; ++d) dst[d] = std::fma(wgt, part[2 + d], dst[d]);
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < D; ++d) dst[d] *= inv;
  }
}

}  // namespace

bool attention_fast_path(int head_dim) { return attention_tile_kernels().tiled(head_dim); }

void run_attention(const AttnProblem& p) {
  const int G = p.num_q_heads / p.num_kv_heads, D = p.head_dim;
  // Heads of a group go together (each K/V tile is loaded once for all of them); groups wider
  // than kMaxRows are cut into even chunks.
  const int chunks = (G + kMaxRows - 1) / kMaxRows;
  const int ng = (G + chunks - 1) / chunks;
  const int tokens_per_item = std::max(1, kMaxRows / ng);

  thread_local std::vector<AttnItem> items;
  thread_local std::vector<MergeGroup> groups;
  thread_local ScratchBuffer partial_buffer;
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
          AttnItem w;
          w.seq = si, w.h0 = h0, w.nh = std::min(heads_per_item, p.num_kv_heads - h0);
          w.t0 = t0, w.nt = nt, w.g0 = g0, w.ng = std::min(ng, G - g0);
          w.k0 = 0, w.k1 = kend;
          w.cost = int64_t(item_rows(w)) * (kend + 16);
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
      const AttnItem whole = items[i];
      const int parts = std::min(max_parts, whole.k1 / kMinSplitKeys);
      if (parts < 2) continue;
      // Part boundaries on tile multiples so every part's tiles are full.
      const int span = (whole.k1 + parts - 1) / parts;
      const int step = (span + kTileKeys - 1) / kTileKeys * kTileKeys;
      MergeGroup g{whole, partial_floats, 0};
      const int64_t part_floats = int64_t(item_rows(whole)) * (D + 2);
      for (int k0 = 0; k0 < whole.k1; k0 += step) {
        AttnItem w = whole;
        w.k0 = k0, w.k1 = std::min(whole.k1, k0 + step);
        w.partial = partial_floats;
        w.cost = int64_t(item_rows(w)) * (w.k1 - w.k0 + 16);
        partial_floats += part_floats;
        ++g.num_parts;
        if (k0 == 0) items[i] = w;
        else items.push_back(w);
      }
      groups.push_back(g);
    }
  }
  float* partials =
      partial_floats > 0 ? static_cast<float*>(partial_buffer.get(size_t(partial_floats) * sizeof(float))) : nullptr;

  // Largest first, handed out one at a time: causal items differ in cost by up to q_len x.
  std::sort(items.begin(), items.end(), [](const AttnItem& a, const AttnItem& b) { return a.cost > b.cost; });
  const int64_t num_items = int64_t(items.size());
  const AttnItem* item_data = items.data();
  const auto run_item = attention_tile_kernels().run_item;
#pragma omp parallel for schedule(dynamic, 1) if (num_items > 1)
  for (int64_t i = 0; i < num_items; ++i) run_item(p, item_data[i], partials);

  const int64_t num_groups = int64_t(groups.size());
  const MergeGroup* group_data = groups.data();
#pragma omp parallel for schedule(dynamic, 1) if (num_groups > 1)
  for (int64_t i = 0; i < num_groups; ++i) merge_group(p, group_data[i], partials);
}

}  // namespace prism::cpu

// engines/generate/media_rows.cpp: placement, seeds, checks and pooling of media rows.
#include "engines/generate/media_rows.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

namespace prism::engines::generate {
namespace {

std::string item_name(size_t index) { return "media item " + std::to_string(index); }

// splitmix64's finaliser: spreads a row index over all 64 bits.
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t item_seed_base(const frontends::MediaItem& item) {
  const uint64_t words[4] = {item.key.high, item.key.low, uint64_t(item.spatial_pool), uint64_t(item.temporal_pool)};
  return XXH3_64bits(words, sizeof words);
}

uint64_t row_seed(uint64_t base, int64_t row) {
  const uint64_t s = mix64(base ^ (uint64_t(row) * 0x9e3779b97f4a7c15ull));
  return s == 0 ? 1 : s;  // 0 means text
}

}  // namespace

uint64_t media_row_seed(const frontends::MediaItem& item, int64_t row) { return row_seed(item_seed_base(item), row); }

Status check_media_item(const frontends::MediaItem& item, int64_t image_size, int64_t grid_side, size_t index) {
  const media::PixelViews* v = item.views.get();
  if (v == nullptr || v->num_views < 1) return invalid_argument(item_name(index) + " has no pixel views");
  if (v->side != image_size || int64_t(v->values.size()) != int64_t(v->num_views) * 3 * image_size * image_size)
    return invalid_argument(item_name(index) + " has " + std::to_string(v->num_views) + " views of side " +
                            std::to_string(v->side) + " (" + std::to_string(v->values.size()) +
                            " values); the model's encoder takes views of [3, " + std::to_string(image_size) + ", " +
                            std::to_string(image_size) + "]");
  if (item.spatial_pool < 1 || grid_side % item.spatial_pool != 0)
    return invalid_argument(item_name(index) + ": spatial pool " + std::to_string(item.spatial_pool) +
                            " does not divide the encoder's grid side " + std::to_string(grid_side));
  if (item.temporal_pool < 1)
    return invalid_argument(item_name(index) + ": temporal pool must be >= 1 (got " +
                            std::to_string(item.temporal_pool) + ")");
  const int64_t side = grid_side / item.spatial_pool;
  const int64_t groups = (v->num_views + item.temporal_pool - 1) / item.temporal_pool;
  if (item.num_rows != groups * side * side)
    return invalid_argument(item_name(index) + " says " + std::to_string(item.num_rows) + " rows, but its " +
                            std::to_string(v->num_views) + " views give " + std::to_string(groups * side * side) +
                            " (" + std::to_string(groups) + " view groups of temporal pool " +
                            std::to_string(item.temporal_pool) + " × " + std::to_string(side) +
                            "² after spatial pool " + std::to_string(item.spatial_pool) + ")");
  return {};
}

Result<PromptMedia> place_media(std::span<const int32_t> prompt, int32_t image_token_id,
                                std::span<const frontends::MediaItem> items) {
  PromptMedia m;
  m.item_first_row.reserve(items.size() + 1);
  m.item_first_row.push_back(0);
  for (const frontends::MediaItem& item : items) m.item_first_row.push_back(m.item_first_row.back() + item.num_rows);
  const int64_t positions = std::count(prompt.begin(), prompt.end(), image_token_id);
  if (positions != m.num_rows()) {
    std::string per_item;
    for (size_t k = 0; k < items.size(); ++k)
      per_item += (k == 0 ? " (" : ", ") + std::to_string(items[k].num_rows) + (k + 1 == items.size() ? ")" : "");
    return invalid_argument("the prompt has " + std::to_string(positions) + " image-token positions (token id " +
                            std::to_string(image_token_id) + "), but its " + std::to_string(items.size()) +
                            " media item(s) give " + std::to_string(m.num_rows()) + " rows" + per_item);
  }
  if (items.empty()) return m;
  m.row_of.assign(prompt.size(), -1);
  m.seeds.assign(prompt.size(), 0);
  m.item_last_position.assign(items.size(), 0);
  size_t item = 0;
  uint64_t base = item_seed_base(items[0]);
  int64_t row = 0;
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    if (prompt[pos] != image_token_id) continue;
    while (row >= m.item_first_row[item + 1]) base = item_seed_base(items[++item]);  // skips 0-row items
    m.row_of[pos] = int32_t(row);
    m.seeds[pos] = row_seed(base, row - m.item_first_row[item]);
    m.item_last_position[item] = int64_t(pos);
    m.end = int64_t(pos) + 1;
    ++row;
  }
  return m;
}

// NOTE: out row (g, a, b) = mean over the views of group g (t consecutive views, the last
// group possibly fewer) and the p × p cells (a·p + i, b·p + j) of each view's grid.
Status pool_media_rows(const encode::MediaFeatures& features, const frontends::MediaItem& item, int64_t grid_side,
                       std::span<float> out) {
  const int64_t views = item.views ? item.views->num_views : 0;
  const int64_t hidden = features.cols, p = item.spatial_pool, t = item.temporal_pool;
  if (features.rows != views * grid_side * grid_side || int64_t(features.values.size()) != features.rows * hidden)
    return invalid_argument("the encoder features have " + std::to_string(features.rows) + " rows for " +
                            std::to_string(views) + " views of " + std::to_string(grid_side * grid_side) +
                            " rows (" + std::to_string(views * grid_side * grid_side) + " expected)");
  if (p < 1 || t < 1 || grid_side % p != 0)
    return invalid_argument("pooling " + std::to_string(p) + " × " + std::to_string(t) +
                            " does not fit the grid side " + std::to_string(grid_side));
  const int64_t q = grid_side / p, groups = (views + t - 1) / t;
  if (groups * q * q != item.num_rows || int64_t(out.size()) != item.num_rows * hidden)
    return invalid_argument("pooling gives " + std::to_string(groups * q * q) + " rows of " + std::to_string(hidden) +
                            " values, but the item has " + std::to_string(item.num_rows) + " rows in " +
                            std::to_string(out.size()) + " values");
  if (p == 1 && t == 1) {
    std::memcpy(out.data(), features.values.data(), out.size_bytes());
    return {};
  }
  const float* in = features.values.data();
  std::fill(out.begin(), out.end(), 0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t first = g * t, last = std::min(views, first + t);
    const float scale = 1.0f / float((last - first) * p * p);
    for (int64_t a = 0; a < q; ++a)
      for (int64_t b = 0; b < q; ++b) {
        float* dst = out.data() + ((g * q + a) * q + b) * hidden;
        for (int64_t v = first; v < last; ++v)
          for (int64_t i = 0; i < p; ++i)
            for (int64_t j = 0; j < p; ++j) {
              const float* src = in + ((v * grid_side + a * p + i) * grid_side + b * p + j) * hidden;
              for (int64_t h = 0; h < hidden; ++h) dst[h] += src[h];
            }
        for (int64_t h = 0; h < hidden; ++h) dst[h] *= scale;
      }
  }
  return {};
}

}  // namespace prism::engines::generate

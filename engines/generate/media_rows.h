// engines/generate/media_rows.h: how a multimodal prompt's media become decoder input rows:
// which prompt positions take which row (HF's masked_scatter order: the k-th image-token
// position takes the k-th row of the items' rows, items in prompt order), the per-position
// media seeds that the prefix cache hashes (kv_block_pool.h), the checks of an item against
// the encoder's geometry, and the pooling of an item's encoder features (spatial p × p
// average per view, then temporal average over groups of t views) into its rows.
// Plain arrays only: it must not run the encoder, touch the media cache or the KV cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engines/encode/media_cache.h"
#include "frontends/generate_payload.h"

namespace prism::engines::generate {

// Where a prompt's media rows go. Built once per request; shared by its choices.
struct PromptMedia {
  std::vector<int32_t> row_of;           // per prompt position: its row of the request's rows, -1 for text
  std::vector<uint64_t> seeds;           // per prompt position: media seed (0 for text)
  std::vector<int64_t> item_first_row;   // per item, and the total at the end: items.size() + 1 entries
  std::vector<int64_t> item_last_position;  // per item: the prompt position of its last row
  int64_t end = 0;                       // one past the last visual position (0: no media rows)
  int64_t num_rows() const { return item_first_row.empty() ? 0 : item_first_row.back(); }
};

// invalid_argument naming both counts when the prompt's image-token positions are not
// exactly the items' rows (sum of num_rows). Items must have passed check_media_item.
Result<PromptMedia> place_media(std::span<const int32_t> prompt, int32_t image_token_id,
                                std::span<const frontends::MediaItem> items);

// An item against an encoder taking [3, image_size, image_size] views and giving
// grid_side² rows per view: views present and of that side, spatial_pool ≥ 1 dividing
// grid_side, temporal_pool ≥ 1, num_rows = ceil(views / t) · (grid_side / p)². invalid_argument
// naming item `index` and the numbers.
Status check_media_item(const frontends::MediaItem& item, int64_t image_size, int64_t grid_side, size_t index);

// The rows num_rows(item) of an item from its encoder features ([views · grid_side², hidden]),
// written to out ([item.num_rows, hidden] f32). invalid_argument naming the counts when the
// features do not have the item's views' rows or out the item's rows.
Status pool_media_rows(const encode::MediaFeatures& features, const frontends::MediaItem& item, int64_t grid_side,
                       std::span<float> out);

// The seed of row `row` of `item`: a hash of the item's key, its pooling and the row index;
// never 0.
uint64_t media_row_seed(const frontends::MediaItem& item, int64_t row);

}  // namespace prism::engines::generate

// models/vlm/pixel_shuffle.h: Idefics3's connector shuffle (Idefics3Connector.pixel_shuffle,
// also SmolVLM's): each s × s block of a view's patch grid becomes one row holding the
// block's s² feature vectors side by side, so a view keeps its pixels' information in s²
// times fewer, s² times wider rows. A pure reshape: no arithmetic, no weights.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace prism::models {

// x [V * side², D] f32, each view's rows in raster order of its side × side grid →
// [V * (side / s)², s² * D] f32 contiguous (side divisible by s). NOTE: output row (i, j) of
// a view (raster order over the (side / s)² grid) holds, at feature (a * s + c) * D + d,
// x[row i * s + a, column j * s + c, feature d]: the order HF's view / permute / reshape
// sequence produces (its two permutes of height and width cancel out).
Tensor pixel_shuffle(const Tensor& x, int64_t num_views, int64_t side, int64_t scale);

}  // namespace prism::models

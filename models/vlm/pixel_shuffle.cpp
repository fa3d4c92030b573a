// pixel_shuffle: one strided copy through a 6-D view.
#include "models/vlm/pixel_shuffle.h"

#include "base/check.h"

namespace prism::models {

Tensor pixel_shuffle(const Tensor& x, int64_t num_views, int64_t side, int64_t scale) {
  PRISM_CHECK_MSG(x.dim() == 2 && x.is_contiguous() && x.size(0) == num_views * side * side,
                  "pixel_shuffle: x must be [V * side², D] contiguous");
  PRISM_CHECK_MSG(scale > 0 && side % scale == 0, "pixel_shuffle: side must be a multiple of scale");
  const int64_t d = x.size(1), out_side = side / scale;
  // [V, i, a, j, c, D] with row = i * s + a, column = j * s + c → [V, i, j, a, c, D].
  return x.view({num_views, out_side, scale, out_side, scale, d})
      .permute({0, 1, 3, 2, 4, 5})
      .contiguous()
      .view({num_views * out_side * out_side, scale * scale * d});
}

}  // namespace prism::models

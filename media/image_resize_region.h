// media/image_resize_region.h: a window of resize()'s output, computed alone. Each output
// pixel of PIL's resampling depends only on its own coefficients, so the window equals the
// same pixels of the full resize; resize-then-crop (CLIP's processor) costs the crop, not the
// resize. That also keeps an extreme aspect ratio (16384 x 1 resized to a 336 shortest edge
// is 5.5 M pixels wide) from allocating the whole intermediate image.
#pragma once

#include "media/image.h"
#include "media/image_preprocess.h"

namespace prism::media {

struct Region {
  int x = 0, y = 0, width = 0, height = 0;  // inside the width x height output
};

// Pixels `region` of resize(image, width, height, filter), equal to them exactly.
Image resize_region(const Image& image, int width, int height, Resample filter, const Region& region);

}  // namespace prism::media

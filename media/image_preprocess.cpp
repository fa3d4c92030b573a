// preprocess_image / preprocess_frame: the pixel_values of transformers' CLIPImageProcessor,
// SiglipImageProcessor and Idefics3ImageProcessor (the PIL "slow" processors), step for step:
// sizes computed with the same integer/float rounding, resampling through resize() (PIL's),
// crops on 8-bit pixels, then rescale in double cast to float and normalise in float, as
// numpy does there. tests/reference/image_processors.py is the reference.
// NOTE: every view is square (side x side) and laid out CHW; idefics3 tiles are exact
// multiples of the tile side, so cropping never pads.
#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "media/image_preprocess.h"
#include "media/image_resize_region.h"

namespace prism::media {

namespace {

struct Size {
  int height = 0, width = 0;
};

// Idefics3's absolute cap on the resized longest edge (MAX_IMAGE_SIZE in transformers).
constexpr int kIdefics3MaxImageSize = 4096;

// CLIP's get_resize_output_image_size(default_to_square=False): the shortest edge becomes
// `shortest`, the other int(shortest * long / short).
Size shortest_edge_size(int height, int width, int shortest) {
  const int short_side = std::min(height, width), long_side = std::max(height, width);
  const int new_long = int(double(int64_t(shortest) * long_side) / double(short_side));
  return width <= height ? Size{new_long, shortest} : Size{shortest, new_long};
}

// Idefics3: _resize_output_size_rescale_to_max_len then _resize_output_size_scale_below_upper_bound.
Size longest_edge_size(int height, int width, int max_len) {
  double aspect = double(width) / double(height);
  int h = height, w = width;
  if (w >= h) {
    w = max_len;
    h = int(double(w) / aspect);
    if (h % 2 != 0) h += 1;
  } else {
    h = max_len;
    w = int(double(h) * aspect);
    if (w % 2 != 0) w += 1;
  }
  h = std::max(h, 1), w = std::max(w, 1);
  aspect = double(w) / double(h);
  if (w >= h && w > kIdefics3MaxImageSize) {
    w = kIdefics3MaxImageSize;
    h = int(double(w) / aspect);
  } else if (h > w && h > kIdefics3MaxImageSize) {
    h = kIdefics3MaxImageSize;
    w = int(double(h) * aspect);
  }
  return Size{std::max(h, 1), std::max(w, 1)};
}

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

// Idefics3's resize_for_vision_encoder: both sides up to multiples of the tile, the second
// from the aspect ratio. NOTE: a side that would round to 0 (transformers would fail) is
// one tile.
Size tile_multiple_size(int height, int width, int tile) {
  const double aspect = double(width) / double(height);
  int h, w;
  if (width >= height) {
    w = round_up(width, tile);
    h = round_up(int(double(w) / aspect), tile);
  } else {
    h = round_up(height, tile);
    w = round_up(int(double(h) * aspect), tile);
  }
  return Size{std::max(h, tile), std::max(w, tile)};
}

// transformers' center_crop of an H x W image to crop_h x crop_w: the crop's top-left corner
// sits at floor((H - crop_h) / 2), floor((W - crop_w) / 2) (numpy floor division, negative
// when the crop is larger), and pixels outside the image are 0.
struct CenterCrop {
  int top = 0, left = 0;
  Region window;  // the part of the image inside the crop
};

CenterCrop center_crop_of(int height, int width, int crop_h, int crop_w) {
  auto floor_half = [](int v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
  CenterCrop c;
  c.top = floor_half(height - crop_h);
  c.left = floor_half(width - crop_w);
  c.window.x = std::max(0, c.left);
  c.window.y = std::max(0, c.top);
  c.window.width = std::min(width, c.left + crop_w) - c.window.x;
  c.window.height = std::min(height, c.top + crop_h) - c.window.y;
  return c;
}

// The crop from its window's pixels (`part`, window-sized), zero elsewhere.
Image place_window(const Image& part, const CenterCrop& c, int crop_h, int crop_w) {
  Image out;
  out.width = crop_w;
  out.height = crop_h;
  out.pixels.assign(size_t(crop_w) * crop_h * 3, 0);
  const int dx = c.window.x - c.left, dy = c.window.y - c.top;
  for (int y = 0; y < part.height; ++y)
    std::copy_n(&part.pixels[size_t(y) * part.width * 3], size_t(part.width) * 3,
                &out.pixels[(size_t(y + dy) * crop_w + dx) * 3]);
  return out;
}

Image crop(const Image& image, int x0, int y0, int w, int h) {
  Image out;
  out.width = w;
  out.height = h;
  out.pixels.resize(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    std::copy_n(&image.pixels[(size_t(y0 + y) * image.width + x0) * 3], size_t(w) * 3, &out.pixels[size_t(y) * w * 3]);
  return out;
}

// What each 8-bit level of each channel becomes: rescale (double, then float) and normalise
// (float), as transformers' rescale() and normalize() compute them.
struct LevelTable {
  float value[3][256];
  explicit LevelTable(const ImageProcessorConfig& config) {
    for (int c = 0; c < 3; ++c)
      for (int v = 0; v < 256; ++v) {
        float x = config.do_rescale ? float(double(v) * config.rescale_factor) : float(v);
        if (config.do_normalize) x = (x - config.image_mean[c]) / config.image_std[c];
        value[c][v] = x;
      }
  }
};

// Appends the side x side window at (x0, y0) of `image` as CHW floats.
void append_window(const Image& image, int x0, int y0, int side, const LevelTable& table, std::vector<float>& values) {
  const size_t plane = size_t(side) * side;
  const size_t base = values.size();
  values.resize(base + 3 * plane);
  float* out[3] = {&values[base], &values[base + plane], &values[base + 2 * plane]};
  for (int y = 0; y < side; ++y) {
    const uint8_t* row = &image.pixels[(size_t(y0 + y) * image.width + x0) * 3];
    for (int x = 0; x < side; ++x)
      for (int c = 0; c < 3; ++c) out[c][size_t(y) * side + x] = table.value[c][row[x * 3 + c]];
  }
}

void append_view(const Image& view, const ImageProcessorConfig& config, std::vector<float>& values) {
  PRISM_CHECK(view.width == view.height);
  append_window(view, 0, 0, view.width, LevelTable(config), values);
}

PixelViews single_view(const Image& view, const ImageProcessorConfig& config) {
  PixelViews out;
  out.side = view.width;
  out.num_views = 1;
  append_view(view, config, out.values);
  return out;
}

PixelViews preprocess_clip(const Image& image, const ImageProcessorConfig& config) {
  const int crop_h = config.height, crop_w = config.width;
  if (!config.do_resize) {  // config validation: then do_center_crop is set
    const CenterCrop c = center_crop_of(image.height, image.width, crop_h, crop_w);
    return single_view(place_window(crop(image, c.window.x, c.window.y, c.window.width, c.window.height), c, crop_h, crop_w),
                       config);
  }
  const Size s = config.shortest_edge > 0 ? shortest_edge_size(image.height, image.width, config.shortest_edge)
                                          : Size{config.height, config.width};
  if (!config.do_center_crop) return single_view(resize(image, s.width, s.height, config.resample), config);
  // NOTE: only the crop window of the resize is computed: the same pixels (see
  // image_resize_region.h), and an extreme aspect ratio cannot blow up the intermediate.
  const CenterCrop c = center_crop_of(s.height, s.width, crop_h, crop_w);
  const Image part = resize_region(image, s.width, s.height, config.resample, c.window);
  return single_view(place_window(part, c, crop_h, crop_w), config);
}

PixelViews preprocess_siglip(const Image& image, const ImageProcessorConfig& config) {
  return single_view(resize(image, config.width, config.height, config.resample), config);
}

// The longest edge the first resize aims at: the processor's, capped by the budget's
// max_side (as if size.longest_edge were that), then lowered one tile at a time until the
// tile grid fits max_tiles. 0 when the image keeps its size (do_resize false, no cap hit).
int idefics3_target_edge(const Image& image, const ImageProcessorConfig& config, const ImageBudget& budget,
                         bool split) {
  int target = config.do_resize ? config.longest_edge : 0;
  const int own = std::max(image.width, image.height);
  if (budget.max_side > 0 && budget.max_side < (target > 0 ? target : own)) target = budget.max_side;
  if (!split || budget.max_tiles <= 0) return target;
  auto tiles = [&](int edge) {
    const Size s = edge > 0 ? longest_edge_size(image.height, image.width, edge) : Size{image.height, image.width};
    const Size t = tile_multiple_size(s.height, s.width, config.tile_size);
    return int64_t(t.height / config.tile_size) * (t.width / config.tile_size);
  };
  const int start = target > 0 ? target : own;
  for (int k = (start + config.tile_size - 1) / config.tile_size; k >= 1; --k) {
    const int edge = std::min(start, k * config.tile_size);
    // A 1x1 grid is the global view alone: it always fits.
    if (tiles(edge) <= budget.max_tiles || k == 1) return edge == own && target == 0 ? 0 : edge;
  }
  return target;
}

PixelViews preprocess_idefics3(const Image& image, const ImageProcessorConfig& config, const ImageBudget& budget) {
  const int tile = config.tile_size;
  const bool split = config.do_image_splitting && budget.max_tiles != 0;
  const int edge = idefics3_target_edge(image, config, budget, split);
  Image resized_storage;
  const Image* resized = &image;  // no copy when the size is kept
  if (edge > 0) {
    const Size s = longest_edge_size(image.height, image.width, edge);
    resized_storage = resize(image, s.width, s.height, config.resample);
    resized = &resized_storage;
  }
  PixelViews out;
  out.side = tile;
  if (!split) {  // transformers squares the image to the tile
    out.num_views = 1;
    append_view(resize(*resized, tile, tile, config.resample), config, out.values);
    return out;
  }
  const Size t = tile_multiple_size(resized->height, resized->width, tile);
  const Image grid = resize(*resized, t.width, t.height, config.resample);
  if (grid.height > tile || grid.width > tile) {
    out.rows = grid.height / tile;
    out.cols = grid.width / tile;
    out.values.reserve(size_t(out.rows * out.cols + 1) * 3 * tile * tile);
    const LevelTable table(config);
    for (int r = 0; r < out.rows; ++r)
      for (int c = 0; c < out.cols; ++c) append_window(grid, c * tile, r * tile, tile, table, out.values);
    append_view(resize(grid, tile, tile, config.resample), config, out.values);
    out.num_views = out.rows * out.cols + 1;
  } else {
    out.num_views = 1;
    append_view(grid, config, out.values);
  }
  return out;
}

}  // namespace

PixelViews preprocess_image(const Image& image, const ImageProcessorConfig& config, const ImageBudget& budget) {
  PRISM_CHECK(image.width > 0 && image.height > 0);
  switch (config.kind) {
    case ProcessorKind::clip: return preprocess_clip(image, config);
    case ProcessorKind::siglip: return preprocess_siglip(image, config);
    case ProcessorKind::idefics3: return preprocess_idefics3(image, config, budget);
  }
  PRISM_CHECK_MSG(false, "unknown processor kind");
  return {};
}

PixelViews preprocess_frame(const Image& frame, const ImageProcessorConfig& config) {
  ImageBudget global_only;
  global_only.max_tiles = 0;
  return preprocess_image(frame, config, global_only);
}

}  // namespace prism::media

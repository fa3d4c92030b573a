// engines/encode/media_encode.h: the encode pattern for images and video frames: the views of
// many media items (several requests' images, a video's frames) go through a
// models::MediaEncoder in micro-batches of at most max_views views, and each item gets its
// rows back as MediaFeatures (what the media cache stores). A micro-batch may hold views of
// several items and an item's views may span micro-batches: views are independent, so the
// cut changes nothing but speed. It must not: look at the media cache, pool or place rows
// (engines/generate does), or start threads. Not thread-safe: one runner per engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engines/encode/media_cache.h"
#include "media/image_preprocess.h"
#include "runtime/arena.h"

namespace prism::models {
class MediaEncoder;
}

namespace prism::engines::encode {

// What one encode() did.
struct MediaEncodeStats {
  int64_t items = 0;
  int64_t views = 0;
  int64_t calls = 0;     // MediaEncoder::encode calls (micro-batches)
  double seconds = 0.0;  // wall time of those calls
};

class MediaEncodeRunner {
 public:
  // encoder: not owned, outlives the runner. max_views >= 1: views per encoder call.
  MediaEncodeRunner(const models::MediaEncoder& encoder, int max_views);

  // Every item's views (each [num_views, 3, image_size, image_size], num_views >= 1) → its
  // features [num_views * grid_side², output_size] f32, in item order. invalid_argument
  // naming the item when its views do not fit the encoder; internal when the encoder fails
  // or returns another shape (the caller fails the items' requests).
  Result<std::vector<MediaFeaturesPtr>> encode(std::span<const media::PixelViews* const> items,
                                               MediaEncodeStats* stats = nullptr);

  int max_views() const { return max_views_; }

 private:
  const models::MediaEncoder& encoder_;
  int max_views_;
  Arena arena_;                // activations of one micro-batch
  std::vector<float> pixels_;  // a micro-batch's views gathered from several items
};

}  // namespace prism::engines::encode

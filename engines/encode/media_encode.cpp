// engines/encode/media_encode.cpp: MediaEncodeRunner: micro-batches of views, one encoder call
// each, rows copied out into per-item features.
#include "engines/encode/media_encode.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "base/check.h"
#include "models/media_encoder.h"

namespace prism::engines::encode {
namespace {

// A run of consecutive views of one item inside a micro-batch.
struct Segment {
  size_t item;
  int64_t first_view, num_views;
};

}  // namespace

MediaEncodeRunner::MediaEncodeRunner(const models::MediaEncoder& encoder, int max_views)
    : encoder_(encoder), max_views_(max_views) {
  PRISM_CHECK(max_views >= 1);
}

Result<std::vector<MediaFeaturesPtr>> MediaEncodeRunner::encode(std::span<const media::PixelViews* const> items,
                                                                MediaEncodeStats* stats) {
  const int64_t side = encoder_.image_size(), grid = encoder_.grid_side(), cols = encoder_.output_size();
  const int64_t rows_per_view = grid * grid, values_per_view = 3 * side * side;
  std::vector<std::shared_ptr<MediaFeatures>> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const media::PixelViews* v = items[i];
    if (v == nullptr || v->num_views < 1)
      return invalid_argument("media item " + std::to_string(i) + " has no pixel views");
    if (v->side != side || int64_t(v->values.size()) != int64_t(v->num_views) * values_per_view)
      return invalid_argument("media item " + std::to_string(i) + " has " + std::to_string(v->num_views) +
                              " views of side " + std::to_string(v->side) + " (" + std::to_string(v->values.size()) +
                              " values), but the encoder takes views of [3, " + std::to_string(side) + ", " +
                              std::to_string(side) + "]");
    auto f = std::make_shared<MediaFeatures>();
    f->rows = v->num_views * rows_per_view;
    f->cols = cols;
    f->values.resize(size_t(f->rows * cols));
    out.push_back(std::move(f));
  }

  MediaEncodeStats local;
  local.items = int64_t(items.size());
  // NOTE: views are cut in item order into runs of max_views_; a run that stays inside one
  // item is passed without a copy, a run across items is gathered into pixels_.
  size_t item = 0;
  int64_t view = 0;
  std::vector<Segment> segments;
  while (item < items.size()) {
    segments.clear();
    int64_t batch_views = 0;
    while (item < items.size() && batch_views < max_views_) {
      const int64_t take = std::min<int64_t>(max_views_ - batch_views, items[item]->num_views - view);
      segments.push_back({item, view, take});
      batch_views += take;
      view += take;
      if (view == items[item]->num_views) {
        ++item;
        view = 0;
      }
    }
    float* pixels;
    if (segments.size() == 1) {
      const Segment& s = segments[0];
      // The encoder only reads its input.
      pixels = const_cast<float*>(items[s.item]->values.data()) + s.first_view * values_per_view;
    } else {
      pixels_.resize(size_t(batch_views * values_per_view));
      float* dst = pixels_.data();
      for (const Segment& s : segments) {
        const float* src = items[s.item]->values.data() + s.first_view * values_per_view;
        std::memcpy(dst, src, size_t(s.num_views * values_per_view) * sizeof(float));
        dst += s.num_views * values_per_view;
      }
      pixels = pixels_.data();
    }

    std::string error;
    {
      ArenaScope scope(&arena_);
      const Tensor input = Tensor::from_blob(pixels, {batch_views, 3, side, side}, DType::f32);
      const auto start = std::chrono::steady_clock::now();
      Tensor rows;
      try {
        rows = encoder_.encode(input);
      } catch (const std::exception& e) {
        error = e.what();
      }
      local.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++local.calls;
      local.views += batch_views;
      if (error.empty() && (!rows.defined() || rows.dim() != 2 || rows.size(0) != batch_views * rows_per_view ||
                            rows.size(1) != cols || rows.dtype() != DType::f32))
        error = "the media encoder returned " + (rows.defined() ? rows.to_string() : std::string("nothing")) +
                " for " + std::to_string(batch_views) + " views (expected [" +
                std::to_string(batch_views * rows_per_view) + ", " + std::to_string(cols) + "] f32)";
      if (error.empty()) {
        const Tensor c = rows.contiguous();
        const float* src = c.data<float>();
        for (const Segment& s : segments) {
          const int64_t n = s.num_views * rows_per_view * cols;
          std::memcpy(out[s.item]->values.data() + s.first_view * rows_per_view * cols, src, size_t(n) * sizeof(float));
          src += n;
        }
      }
    }
    arena_.reset();
    if (!error.empty()) {
      if (stats) *stats = local;
      return internal_error("media encoding failed: " + error);
    }
  }
  if (stats) *stats = local;
  return std::vector<MediaFeaturesPtr>(out.begin(), out.end());
}

}  // namespace prism::engines::encode

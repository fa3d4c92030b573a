// models/media_encoder.h: the vision half of a vision-language model, behind one interface:
// preprocessed pixel views in, rows in the language model's embedding space out (the vision
// tower, its feature selection and the projector / connector). The engine splices those rows
// into the prompt at the image placeholders. It computes only: batching across images and
// frames, the media cache and pooling belong to engines/.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace prism::models {

class MediaEncoder {
 public:
  virtual ~MediaEncoder() = default;
  // pixels [V, 3, image_size(), image_size()] f32 (media::PixelViews) → [V * grid_side()²,
  // output_size()] f32: each view's rows in raster order of its grid_side() × grid_side()
  // grid, views back to back. Any V ≥ 1: views are independent (batching changes nothing).
  virtual Tensor encode(const Tensor& pixels) const = 0;
  virtual int64_t image_size() const = 0;
  // Rows per view = grid_side()²: LLaVA-1.5 24 (576 rows), SmolVLM 8 after pixel shuffle (64).
  virtual int64_t grid_side() const = 0;
  virtual int64_t output_size() const = 0;  // the LM's hidden size
  // Multiply-adds × 2 of encoding one view (tower + projector).
  virtual double flops_per_view() const = 0;
};

}  // namespace prism::models

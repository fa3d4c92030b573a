// models/vision/dual_encoder.h: CLIP and SigLIP dual encoders (CLIPModel in the
// openai/clip-vit-base-patch32 layout, SiglipModel in the siglip-base layout): a text tower
// and an image tower whose pooled, projected outputs share one embedding space. Served by
// the embeddings engine: texts through the Encoder interface (so the embedder's batching and
// last-token pooling apply), images through embed_images.
//  - CLIP text: causal transformer, final_layer_norm, pooled at the end-of-text token (the
//    last token of a sequence), text_projection (no bias). Image: class token after
//    post_layernorm, visual_projection (no bias).
//  - SigLIP text: bidirectional transformer over a sequence padded to its max length,
//    final_layer_norm, pooled at the last position, head (linear). Image: the tower's
//    attention-pooling head.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "models/encoder.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models {

// The image tower, pooled and projected.
class ImageEmbedder {
 public:
  virtual ~ImageEmbedder() = default;
  // pixels [V, 3, image_size(), image_size()] f32 → [V, embedding_size()] f32, unnormalised.
  virtual Tensor embed_images(const Tensor& pixels) const = 0;
  virtual int64_t image_size() const = 0;
  virtual int64_t embedding_size() const = 0;  // projection_dim (CLIP) / hidden_size (SigLIP)
  virtual double flops_per_image() const = 0;  // multiply-adds × 2
};

struct DualEncoderModel {
  // The text tower as an Encoder: encode() returns, for every token, the hidden state after
  // the final layer norm and the projection (a per-token linear map), so the embedder's
  // last-token pooling yields the model's text embedding (unnormalised); hidden_size() is
  // the embedding size.
  std::unique_ptr<Encoder> text;
  std::unique_ptr<ImageEmbedder> image;
};

// True when <dir>/config.json's model_type is "clip" or "siglip".
bool is_dual_encoder(const std::string& dir);
Result<DualEncoderModel> load_dual_encoder(const std::string& dir, ops::Precision precision);

}  // namespace prism::models

// engines/encode/embedder.h: token sequences in, pooled (and normalised) vectors out. The
// synchronous core shared by the serving engine (one per replica), `prism embed` bulk jobs
// and the benchmarks. Sorts the sequences by length, cuts them into micro-batches under a
// token budget, runs the encoder, pools, truncates to the requested dims and re-normalises.
// Dual encoders (CLIP, SigLIP) also embed preprocessed images: looked up in the process-wide
// MediaCache first, the rest through the image tower in micro-batches, into the same space.
// Not thread-safe: one Embedder per thread that runs models.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "engines/encode/media_cache.h"
#include "frontends/embed_frontend.h"
#include "media/image_preprocess.h"
#include "media/media_key.h"
#include "models/vision/dual_encoder.h"
#include "runtime/arena.h"
#include "runtime/ops.h"

namespace prism::models {
class Encoder;
}

namespace prism::engines::encode {

struct EmbedderOptions {
  ops::Precision precision = ops::Precision::f32;
  int64_t max_batch_tokens = 8192;  // micro-batch budget (real tokens, or padded when !packed)
  int max_batch_sequences = 256;    // micro-batch cap
  // true: sequences back to back, no padding (attention separates them by cu_seqlens).
  // false: each micro-batch padded to its longest sequence (what sentence-transformers does);
  // kept to measure the difference.
  bool packed = true;
  int max_batch_images = 8;  // images per image-tower call (knob max_encoder_views)
};

// What one embed() call did, summed over its micro-batches.
struct EmbedStats {
  int64_t sequences = 0;
  int64_t real_tokens = 0;    // tokens of the inputs
  int64_t padded_tokens = 0;  // rows the model computed (== real_tokens when packed)
  int64_t micro_batches = 0;
  double useful_flops = 0;    // Encoder::flops of the real sequences, plus the images encoded
  int64_t images = 0;          // image inputs
  int64_t images_encoded = 0;  // of which the image tower ran (the rest: media-cache hits or repeats)
  int64_t cache_lookups = 0;   // MediaCache finds (an image repeated within one call looks once)
  int64_t cache_hits = 0;
  int64_t image_batches = 0;   // image-tower calls

  void add(const EmbedStats& o);
};

// One image input: its single preprocessed view and content key (EmbedFrontend::prepare_image).
struct ImageRef {
  const media::PixelViews* views = nullptr;  // not owned; [1, 3, S, S]
  media::MediaKey key;
};

class Embedder {
 public:
  // Loads the frontend's model at options.precision: models/bert, or both towers of a dual
  // encoder (models::load_dual_encoder).
  static Result<std::unique_ptr<Embedder>> load(std::shared_ptr<const frontends::EmbedFrontend> frontend,
                                                const EmbedderOptions& options);
  // Around models already built (tests' fakes, other loaders). invalid_argument when the
  // encoder's hidden size is not the frontend's dims, the options are out of range, or the
  // image tower is missing for a frontend that accepts images (or does not match it: its
  // embedding size and image size are the frontend's dims and image_size).
  static Result<std::unique_ptr<Embedder>> create(std::shared_ptr<const frontends::EmbedFrontend> frontend,
                                                  const EmbedderOptions& options,
                                                  std::unique_ptr<models::Encoder> encoder,
                                                  std::unique_ptr<models::ImageEmbedder> image = nullptr);
  ~Embedder();

  // Vectors of the sequences (each non-empty, at most frontend().max_tokens() long), in input
  // order: [sequences.size() * out_dims] f32 row-major, out_dims = dims ? dims : frontend().dims().
  // dims must pass frontend().check_dimensions. Pooled as the frontend says; L2-normalised
  // when the model normalises (after truncation, so Matryoshka vectors are unit length).
  std::vector<float> embed(std::span<const std::vector<int32_t>> sequences, int64_t dims = 0,
                           EmbedStats* stats = nullptr);
  // The same over views, written into `out` ([sequences.size() * out_dims]): what engines
  // call so that sequences of many requests batch together without copies.
  void embed_into(std::span<const std::span<const int32_t>> sequences, int64_t dims, std::span<float> out,
                  EmbedStats* stats = nullptr);
  // Vectors of images (each passing frontend().check_image) into `out` ([images.size() *
  // out_dims]), in input order, finished as texts are (truncated, normalised). An image whose
  // key the MediaCache holds under image_encoder_id() skips the tower; the others run in
  // micro-batches of max_batch_images (an image repeated in the call runs once) and are
  // cached, unnormalised and at full size, so any dims reuses them.
  void embed_images_into(std::span<const ImageRef> images, int64_t dims, std::span<float> out,
                         EmbedStats* stats = nullptr);
  // One text, and one blank image when the model takes images, straight through the models
  // (no cache): builds the GEMM primitives and sizes the arena before the first request.
  void warm_up();

  bool accepts_images() const { return image_ != nullptr; }
  // The MediaCache's encoder id of this embedder's image vectors: "<model dir>|<precision>|image-embed".
  const std::string& image_encoder_id() const { return image_encoder_id_; }

  const frontends::EmbedFrontend& frontend() const { return *frontend_; }
  const EmbedderOptions& options() const { return options_; }
  const models::Encoder& encoder() const { return *encoder_; }

 private:
  Embedder() = default;
  // Runs sequences[order_[begin..end)] as one encoder call; rows land in `out` by input index.
  void run_micro_batch(std::span<const std::span<const int32_t>> sequences, size_t begin, size_t end,
                       int64_t longest, int64_t out_dims, std::span<float> out, EmbedStats& stats);

  std::shared_ptr<const frontends::EmbedFrontend> frontend_;
  EmbedderOptions options_;
  // Writes vectors[0..n) (rows of `cols` floats, the model's full size) to out rows
  // `rows[0..n)` truncated to out_dims and normalised as the frontend says.
  void finish_rows(const float* vectors, int64_t cols, std::span<const size_t> rows, int64_t out_dims,
                   std::span<float> out);
  // Runs the image tower over images[missing[begin..end)]; their full vectors go to features_.
  void run_image_batch(std::span<const ImageRef> images, std::span<const size_t> missing, EmbedStats& stats);

  std::unique_ptr<models::Encoder> encoder_;
  std::unique_ptr<models::ImageEmbedder> image_;  // null: text only
  std::string image_encoder_id_;
  // Scratch reused from call to call (steady state allocates nothing).
  Arena arena_;                               // activations of one micro-batch
  std::vector<size_t> order_;                 // input indices sorted by length
  std::vector<std::span<const int32_t>> views_;  // embed()'s sequences as views
  std::vector<MediaFeaturesPtr> features_;       // embed_images_into: each image's full vector
  std::vector<float> image_vectors_;             // embed_images_into: those vectors, back to back
  std::vector<size_t> image_rows_;               // embed_images_into: 0 .. images - 1
  std::vector<float> finish_scratch_;            // finish_rows: truncated rows being normalised
};

}  // namespace prism::engines::encode

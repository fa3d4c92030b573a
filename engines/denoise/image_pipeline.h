// engines/denoise/image_pipeline.h: a text-to-image pipeline's components as one object, and
// what one image goes through outside the step loop: the prompt's text states, the request the
// loop runs (latent shape, schedule, sampler, guidance, seed), the final latent decoded to
// pixels, and previews of the loop's clean-latent predictions. Components are read from a
// diffusers directory (model_index.json; text_encoder/, transformer/, vae/, scheduler/) as
// Z-Image's pipeline (ZImagePipeline) composes them; the serving engine, `prism
// generate-image` and the pipeline parity test share this object.
// Must not: loop over steps (DenoiseLoop does), queue, or see requests' HTTP side.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "configs/scheduler_config.h"
#include "engines/denoise/denoise_loop.h"
#include "frontends/image_payload.h"
#include "media/image.h"
#include "models/denoiser.h"
#include "models/encoder.h"
#include "models/taesd/taesd.h"
#include "models/vae/autoencoder_kl.h"
#include "runtime/ops.h"

namespace prism::engines::denoise {

struct ImagePipelineOptions {
  ops::Precision precision = ops::Precision::f32;  // the transformer's linears
  // The text encoder's linears. It runs once per prompt, not per step, but holds as many bytes
  // as the transformer (Z-Image: 4B parameters beside 6B): int8 halves its 8 GB of bf16.
  ops::Precision text_encoder_precision = ops::Precision::f32;
  // The VAE decoder's convolutions (f32, or bf16 where the CPU has native bf16: ~2.3x faster
  // on AMX, ~1e-2 off f32 after the decoder's 15 convolutions in series; docs/image.md).
  ops::Precision vae_precision = ops::Precision::f32;
  // A TAESD-layout decoder (.pth or .safetensors) for the model's latents: previews "tiny" and
  // the fast decode. Empty: none (previews use the fitted projection).
  std::string tiny_autoencoder{};
};

class ImagePipeline {
 public:
  // dir: a diffusers directory of a pipeline Prism runs (ZImagePipeline). Errors name the folder.
  static Result<std::unique_ptr<ImagePipeline>> load(const std::string& dir, const ImagePipelineOptions& options);

  // The text states the denoiser conditions on: [L, cond_dim] f32 for the prompt's L tokens
  // (already templated and cut by the frontend), the text encoder's hidden_states[-2].
  Tensor encode_prompt(std::span<const int32_t> tokens) const;

  // The loop's request for image `image_index` of a request with `params`: latent [C, H/8, W/8]
  // from seed params.seed + image_index, the scheduler's sigmas for the step count (dynamic
  // shift from the image's size, or params.shift), the sampler, the guidance (Z-Image's scale g
  // is the loop's w = 1 + g; no unconditional pass when g <= 1, as the pipeline's
  // do_classifier_free_guidance). uncond: undefined without CFG.
  Result<DenoiseRequest> make_request(int64_t id, const frontends::ImageParams& params, int image_index, Tensor cond,
                                      Tensor uncond) const;

  // The final latent [C, h, w] decoded to 8-bit RGB: by the VAE (tiled past one tile), or by
  // the tiny autoencoder when `tiny` (PRISM_CHECK: has_tiny_autoencoder()).
  media::Image decode(const Tensor& latent, bool tiny = false) const;
  // A preview of a clean-latent prediction [C, h, w]: by the tiny autoencoder when `tiny`, else
  // each latent cell through the per-channel linear projection fitted to this VAE at load,
  // upsampled to the image's size.
  media::Image preview(const Tensor& x0, bool tiny = false) const;
  bool has_tiny_autoencoder() const { return tiny_.has_value(); }

  const models::Denoiser& denoiser() const { return *denoiser_; }
  const configs::SchedulerConfig& scheduler() const { return scheduler_; }
  int64_t latent_channels() const { return denoiser_->latent_channels(); }
  int64_t vae_factor() const { return vae_->spatial_factor(); }

 private:
  ImagePipeline() = default;
  Status fit_preview_projection();

  std::unique_ptr<models::Encoder> text_encoder_;
  std::unique_ptr<models::Denoiser> denoiser_;
  std::unique_ptr<models::AutoencoderKLDecoder> vae_;
  std::optional<models::TaesdDecoder> tiny_;
  configs::SchedulerConfig scheduler_;
  std::string pipeline_;  // model_index.json's _class_name
  Tensor latent_rgb_;     // [C + 1, 3] f32: per-channel RGB weights, then the bias row
};

}  // namespace prism::engines::denoise

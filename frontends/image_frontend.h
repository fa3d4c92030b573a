// frontends/image_frontend.h: what the api needs of an image deployment (task "image")
// before it queues a request, shared read-only by the I/O threads and every replica: the text
// encoder's tokenizer and chat template (the prompt is templated as one user message, as the
// pipeline does), the sizes the model takes, and the model's defaults for the fields a request
// leaves out. Reads only small files of the diffusers layout (model_index.json, tokenizer/,
// transformer/config.json, vae/config.json): no weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "frontends/image_payload.h"
#include "serving/config.h"
#include "serving/engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace prism::frontends {

// The knobs of an image deployment: default_steps, default_guidance_scale (the model's
// defaults for requests; the pipeline's 50 and 5.0 when unset), max_image_side (pixels, 2048),
// max_images (n, 4), max_sequence_length (prompt tokens, the pipeline's 512), tiny_autoencoder
// (the path of a TAESD-layout decoder for the model's latents: previews "tiny"; none by default);
// and the engine's: text_encoder_precision (f32, bf16, int8; default the deployment's precision),
// vae_precision (f32 or bf16; default f32).
const std::vector<std::string_view>& image_knob_names();

class ImageFrontend final : public serving::Frontend {
 public:
  // config.model: a diffusers directory whose model_index.json names a pipeline Prism runs
  // (ZImagePipeline). Errors name the file and key.
  static Result<std::shared_ptr<const ImageFrontend>> load(const serving::DeploymentConfig& config);

  // The prompt as the text encoder reads it: the chat template over one user message with the
  // generation prompt (thinking enabled, as Z-Image's pipeline asks), tokenized, cut to
  // max_sequence_length tokens. An empty prompt is valid (the unconditional pass reads one).
  Result<std::vector<int32_t>> prompt_tokens(std::string_view prompt) const;

  // ok, or invalid_argument as a predicate on the size ("must be a multiple of 16 ...").
  Status check_size(int width, int height) const;
  int size_multiple() const { return size_multiple_; }  // VAE factor x patch: 16 for Z-Image
  int max_side() const { return max_side_; }
  int max_images() const { return max_images_; }
  // The tiny_autoencoder knob's path; empty when previews come from the latent projection only.
  const std::string& tiny_autoencoder() const { return tiny_autoencoder_; }
  // Every field at the model's default; width and height 1024 (clamped to max_side).
  const ImageParams& defaults() const { return defaults_; }
  const std::string& pipeline() const { return pipeline_; }  // model_index.json's _class_name

 private:
  text::Tokenizer tokenizer_;
  std::optional<text::ChatTemplate> chat_template_;
  std::string pipeline_;
  int size_multiple_ = 16;
  int max_side_ = 2048;
  int max_images_ = 4;
  int64_t max_sequence_length_ = 512;
  std::string tiny_autoencoder_;
  ImageParams defaults_;
};

}  // namespace prism::frontends

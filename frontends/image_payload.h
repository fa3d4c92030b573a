// frontends/image_payload.h: the request, previews and result an image deployment (task
// "image") passes between the api and its engine. Plain data: no tensors. The api fills an
// ImageInput from the client's fields, resolved against the model's defaults and checked
// against its limits by ImageFrontend; the engine answers with ImagePreview partials (when
// previews were asked), ImageStep partials (when steps are to be reported) and one ImageOutput.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "media/image.h"
#include "serving/request.h"

namespace prism::frontends {

enum class Sampler : uint8_t { euler, unipc };
enum class PreviewDecoder : uint8_t { latent_rgb, tiny };  // tiny: a TAESD-layout autoencoder

// The fields OpenAI defines, plus the Prism extensions (the request's `prism` object), every
// one resolved: a request that left a field out carries the model's default here.
struct ImageParams {
  int width = 0, height = 0;      // pixels, multiples of ImageFrontend::size_multiple()
  int n = 1;                      // images, each from its own seed (seed, seed + 1, ...)
  int steps = 0;                  // denoising steps
  float guidance_scale = 0.0f;    // the pipeline's g (pos + g (pos - neg)); 0: no unconditional pass
  float cfg_start = 0.0f, cfg_stop = 1.0f;  // CFG only while int(start N) <= step < int(stop N)
  float cfg_truncation = 1.0f;    // Z-Image's: CFG off once the progress t exceeds it
  bool cfg_normalization = false; // Z-Image's: the guided velocity's norm capped at the conditional's
  bool cfg_zero_star = false;     // CFG-Zero*: the unconditional velocity scaled by the projection
  int zero_init_steps = 0;        // CFG-Zero*: the first steps give zero velocity
  float guidance_rescale = 0.0f;  // diffusers' rescale_noise_cfg phi
  Sampler sampler = Sampler::euler;
  float shift = 0.0f;             // 0: the scheduler config's (with its dynamic shifting)
  uint64_t seed = 0;
  int partial_images = 0;         // previews streamed, 0-3, spread over the steps
  PreviewDecoder preview = PreviewDecoder::latent_rgb;
  bool report_steps = false;      // an ImageStep partial after every step (progress bars, job status)
};

struct ImageInput final : serving::Payload {
  std::vector<int32_t> prompt_tokens;    // the chat-templated prompt, truncated to the model's maximum
  std::vector<int32_t> negative_tokens;  // the unconditional prompt (an empty prompt when none was given)
  ImageParams params;
};

// A preview of one image, partial_index-th of its request's params.partial_images.
struct ImagePreview final : serving::Payload {
  int image_index = 0;
  int partial_index = 0;
  int step = 0;  // steps done when it was taken
  media::Image image;
};

// Progress: image image_index has taken `step` of its `steps` steps.
struct ImageStep final : serving::Payload {
  int image_index = 0;
  int step = 0;
  int steps = 0;
};

struct ImageOutput final : serving::Payload {
  std::vector<media::Image> images;  // params.n, in seed order
  int64_t steps = 0;                 // steps run per image
  int64_t cond_passes = 0;           // model passes over every image: conditional ...
  int64_t uncond_passes = 0;         // ... and unconditional
};

}  // namespace prism::frontends

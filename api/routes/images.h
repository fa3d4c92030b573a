// api/routes/images.h: OpenAI's image generation route for deployments of task "image".
//   POST /v1/images/generations {"model", "prompt", "n"?, "size"?: "WxH"|"auto",
//        "response_format"?: "b64_json", "output_format"?: "png"|"jpeg"|"webp",
//        "output_compression"?: 0-100, "quality"?, "background"?: "auto"|"opaque", "user"?,
//        "stream"?: bool, "partial_images"?: 0-3, "priority"?: "online"|"bulk",
//        "prism"?: {"seed", "steps", "guidance_scale", "negative_prompt", "sampler": "euler"|"unipc",
//                   "shift", "cfg_interval": [start, stop], "cfg_truncation", "cfg_normalization",
//                   "cfg_zero_star", "zero_init_steps", "guidance_rescale", "preview": "latent_rgb"|"tiny",
//                   "decoder": "vae"|"tiny"}}
//   → {"created", "data": [{"b64_json"}], "background", "output_format", "quality", "size",
//      "usage": {...}, "prism": {every extension, resolved, with the seed used}}
//   stream: events image_generation.partial_image (previews, partial_image_index 0..k-1 per
//   image) and image_generation.completed (one per image), as OpenAI sends them.
// Fields are read and checked on the I/O thread against the deployment's ImageFrontend (size
// multiples and limits, n, defaults); the prompt is templated and tokenized there too. Images
// are encoded where the engine delivers them (its replica thread): a PNG of a megapixel is a few
// tens of milliseconds against seconds per step. `response_format: "url"` is refused: Prism
// keeps no files to link to.
// Must not: see tensors, or block an I/O thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "api/errors.h"
#include "api/router.h"
#include "frontends/image_frontend.h"
#include "frontends/image_payload.h"
#include "serving/deployment_set.h"

namespace prism::api {

// `deployments` is not owned and must outlive the server.
void add_images_routes(Router& router, serving::DeploymentSet& deployments);

// ---- the route's pure steps, exposed for tests ----

enum class ImageFileFormat : uint8_t { png, jpeg, webp };

// The body as the client sent it; absent optional fields stay empty.
struct ImageFields {
  std::string model, prompt;
  std::optional<int> n;
  std::optional<int> width, height;  // from "size" "WxH"; absent or "auto": the model's default
  ImageFileFormat format = ImageFileFormat::png;
  int compression = 100;  // output_compression (jpeg, webp)
  std::string quality = "auto", background = "auto";
  serving::Lane lane = serving::Lane::online;  // priority
  bool stream = false;
  int partial_images = 0;
  // The prism object.
  std::optional<uint64_t> seed;
  std::optional<int> steps, zero_init_steps;
  std::optional<float> guidance_scale, shift, cfg_truncation, guidance_rescale;
  std::optional<float> cfg_start, cfg_stop;
  std::optional<bool> cfg_normalization, cfg_zero_star;
  std::optional<frontends::Sampler> sampler;
  std::optional<frontends::PreviewDecoder> preview;
  std::optional<bool> tiny_decode;  // "decoder": "vae" | "tiny"
  std::string negative_prompt;
};

// Reads and checks every field of the body (types, ranges, known values); the first error
// names its field.
std::optional<ApiError> read_image_fields(std::string_view body, ImageFields& out);

// The engine's parameters: the fields over the model's defaults, the size checked against the
// model (400 naming "size"), n against the deployment's max_images (400 naming "n"), a seed
// drawn when none was given.
std::optional<ApiError> resolve_image_params(const ImageFields& fields, const frontends::ImageFrontend& frontend,
                                             frontends::ImageParams& out);

// The prism object of a reply: every extension as resolved.
nlohmann::json image_params_json(const frontends::ImageParams& params, std::string_view negative_prompt);

// An image in the requested file format, base64.
std::string encode_image_b64(const media::Image& image, ImageFileFormat format, int compression);

}  // namespace prism::api

// engines/denoise/image_engine.h: the serving engine of task "image": text-to-image requests
// (frontends/image_payload.h) through an ImagePipeline's step loop. Shape: a step loop
// (serve()), as the generate engine's: new requests join between steps, their prompts encoded
// as they arrive; each image of a request is one DenoiseLoop request (seed, seed + 1, ...), so
// images of one request and of concurrent requests at the same size share model passes;
// previews are emitted after the steps the request spread them over; finished latents are
// decoded by the VAE and the request completes once all its images are.
// Series (labels deployment, modality "image"): prism_denoise_steps_total (image steps taken),
// prism_denoise_model_passes_total{pass="cond"|"uncond"}, prism_denoise_step_seconds (one
// loop step: a batched model pass and the samplers), prism_image_seconds (a request, admission
// to completion), prism_text_encode_seconds and prism_vae_decode_seconds.
// Must not: see HTTP, encode image files, or keep requests' state past their completion.
#pragma once

#include "serving/engine.h"

namespace prism::engines::denoise {

// Registers task "image": the ImageFrontend (frontends/image_frontend.h) and this engine.
void register_image_engine(serving::EngineFactories& factories);

// The step at which preview k of `count` is taken, 1-based step counts over `steps` steps:
// spread evenly, the last one before the final step (the final image is not a preview).
int preview_step(int k, int count, int steps);

}  // namespace prism::engines::denoise

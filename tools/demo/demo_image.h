// tools/demo/demo_image.h: the demo text-to-image model, "demo-image": a tiny Z-Image pipeline
// with random weights (fixed seed) in diffusers' layout (model_index.json naming
// ZImagePipeline; scheduler/ with Z-Image-Turbo's FlowMatchEulerDiscreteScheduler config;
// tokenizer/ with demo-chat's byte-level BPE and a Qwen3-style chat template; text_encoder/:
// demo-chat's Llama as a Qwen3Model (q_norm / k_norm added, hidden 64 = the transformer's
// cap_feat_dim); transformer/: a ZImageTransformer2DModel of dim 64, two heads, two layers and
// a refiner layer each; vae/: an AutoencoderKL decoder of four blocks (factor 8) with FLUX's
// latent scaling). It shows the image path end to end (/v1/images/generations, `prism
// generate-image`); its images are coloured noise. Its knobs make a default image 512 x 512
// in 8 steps without guidance, fast on a CPU.
#pragma once

#include <filesystem>

#include "base/status.h"

namespace prism::tools::demo {

// Writes the pipeline into dir (an empty folder). Same bytes on every run and machine.
Status write_demo_image(const std::filesystem::path& dir);

// The [[deployment]] lines of demo-image in the demo prism.toml.
inline constexpr const char* kDemoImageToml =
    "[deployment.knobs]\n"
    "default_steps = 8\n"
    "default_guidance_scale = 0.0\n"
    "max_image_side = 512\n";

}  // namespace prism::tools::demo

// tools/demo/demo_vlm.h: the demo vision-language model, "demo-vlm": a tiny Idefics3 / SmolVLM with
// random weights (fixed seed) under Idefics3ForConditionalGeneration's Hugging Face names and
// config keys: a SigLIP tower (image 32, patch 8: 4 x 4 patches, hidden 32, 2 layers), the
// pixel-shuffle connector (scale_factor 2: 2 x 2 = 4 rows per view) and demo-chat's Llama
// (hidden 64) as the language model, with demo-chat's byte-level BPE plus SmolVLM's image
// tokens ("<image>", "<fake_token_around_image>", "<global-img>", "<row_r_col_c>" for r, c in
// 1..6), an Idefics3ImageProcessor preprocessor_config.json (longest edge 64, tiles of 32:
// at most 2 x 2 tiles + the global view), processor_config.json (image_seq_len 4) and a
// ChatML chat template that writes "<image>" for image and video parts. It shows the image
// and video chat path end to end; its replies are demo-chat's readable babble.
#pragma once

#include <filesystem>

#include "base/status.h"

namespace prism::tools::demo {

// Writes the checkpoint into dir (an empty folder). Same bytes on every run and machine.
Status write_demo_vlm(const std::filesystem::path& dir);

// The [[deployment]] lines of demo-vlm in the demo prism.toml: demo-chat's small KV knobs.
inline constexpr const char* kDemoVlmToml =
    "[deployment.knobs]\n"
    "kv_cache_bytes = 16777216\n"
    "prefix_caching = true\n";

}  // namespace prism::tools::demo

// The small files of a diffusers image model directory (model_index.json, tokenizer/ with a
// Qwen-style chat template, transformer/ and vae/ config.json), no weights: what ImageFrontend
// reads. The tokenizer is GPT-2's byte-level BPE from ../shared/testdata, copied into the
// scratch directory at test time.
#pragma once

#include <string>

namespace prism::test {

struct ImageModelDir {
  std::string pipeline = "ZImagePipeline";
  int vae_blocks = 4;  // block_out_channels entries: a VAE factor of 2^(blocks - 1)
  bool chat_template = true;

  // Writes the directory under the scratch area and returns its path.
  std::string write(const std::string& name) const;
};

}  // namespace prism::test

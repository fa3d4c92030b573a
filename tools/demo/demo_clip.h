// tools/demo/demo_clip.h: the demo image-embedding model, "demo-clip": a tiny CLIP dual encoder
// with random weights (fixed seed) in the openai/clip-vit-base-patch32 layout (CLIPModel's
// config keys and tensor names; a text tower over a small CLIP-shaped byte-level BPE with
// "</w>" word ends and <|startoftext|> / <|endoftext|>, a ViT image tower at image 32, patch 8,
// projection_dim 32) and a CLIPImageProcessor preprocessor_config.json. It serves texts and
// images through /v1/embeddings in one space; its vectors are meaningless.
//
// Also the pieces the demo towers share (demo-vlm's SigLIP tower uses them): a seeded random
// stream and the encoder-layer layout CLIP and SigLIP have in common.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::tools::demo {

// Writes the checkpoint into dir (an empty folder). Same bytes on every run and machine.
Status write_demo_clip(const std::filesystem::path& dir);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Random f32 tensors from one seeded stream, in the order they are drawn: std::mt19937 mapped
// to floats by hand (std's distributions differ between standard libraries), so a demo
// checkpoint is the same bytes everywhere.
class DemoRandom {
 public:
  explicit DemoRandom(uint32_t seed) : rng_(seed) {}
  float uniform() { return static_cast<float>(rng_() >> 8) * (1.0f / 16777216.0f); }  // [0, 1), 24 bits
  // center + uniform(-scale, scale) per element.
  Tensor tensor(const Dims& shape, float center, float scale);
  // A weight whose first dimension is the output: uniform with std 1/sqrt(fan_in), fan_in the
  // product of the other dimensions (activations keep their size through the layers).
  Tensor linear(const Dims& shape);
  Tensor bias(int64_t n) { return tensor({n}, 0.0f, 0.02f); }
  Tensor norm_weight(int64_t n) { return tensor({n}, 1.0f, 0.1f); }  // layer norms near identity

 private:
  std::mt19937 rng_;
};

// The encoder layers CLIP's and SigLIP's towers share, appended to `out`:
// "<prefix>layers.{i}.self_attn.{q,k,v,out}_proj.{weight,bias}", "layer_norm1.*",
// "mlp.fc1.*", "mlp.fc2.*", "layer_norm2.*" (prefix e.g. "vision_model.encoder.").
void append_encoder_layers(const std::string& prefix, int64_t hidden, int64_t intermediate, int num_layers,
                           DemoRandom& random, NamedTensors& out);

}  // namespace prism::tools::demo

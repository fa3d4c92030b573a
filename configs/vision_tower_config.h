// configs/vision_tower_config.h: the vision_config object of a CLIP, SigLIP or Idefics3
// config.json, typed, with transformers' defaults for omitted keys. Hyper-parameters only:
// models/vision/vision_tower.h loads and runs the tower.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace prism::configs {

enum class VisionTowerKind : uint8_t { clip, siglip };

// The vision_config object of config.json (CLIPVisionConfig / SiglipVisionConfig /
// Idefics3VisionConfig): hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, image_size, patch_size, num_channels, layer_norm_eps, hidden_act.
struct VisionTowerConfig {
  VisionTowerKind kind = VisionTowerKind::clip;
  int64_t hidden_size = 0, intermediate_size = 0;
  int num_layers = 0, num_heads = 0;
  int64_t image_size = 0, patch_size = 0, num_channels = 3;
  double layer_norm_eps = 1e-5;
  std::string hidden_act;  // "quick_gelu", "gelu", "gelu_pytorch_tanh"

  int64_t grid_side() const { return image_size / patch_size; }
  int64_t num_patches() const { return grid_side() * grid_side(); }
  // Tokens per image the transformer sees: the patches, plus the class token for CLIP.
  int64_t num_positions() const { return num_patches() + (kind == VisionTowerKind::clip ? 1 : 0); }
  // invalid_argument naming a missing or impossible key.
  static Result<VisionTowerConfig> from_hf(const nlohmann::json& vision_config, VisionTowerKind kind);
};

}  // namespace prism::configs

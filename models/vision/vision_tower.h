// models/vision/vision_tower.h: the ViT image towers of CLIP and SigLIP in their Hugging Face
// layouts (CLIPVisionModel: class token, pre-layernorm, quick_gelu; SiglipVisionModel: no
// class token, gelu_pytorch_tanh, optional attention-pooling head), loaded under any
// parameter prefix so that LLaVA ("vision_tower.vision_model."), Idefics3
// ("model.vision_model.") and the dual encoders ("vision_model.") share one implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "formats/safetensors.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models {

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

class VisionTower {
 public:
  // Loads "<prefix>embeddings.patch_embedding.weight" ... "<prefix>post_layernorm.weight"
  // (CLIP also "<prefix>embeddings.class_embedding", "<prefix>pre_layrnorm.*"). Layers
  // past `num_layers_used` (when > 0) are not loaded: LLaVA reads layer -2's output and
  // never runs the last layer. not_found / invalid_argument naming a missing / misshapen tensor.
  static Result<std::unique_ptr<VisionTower>> load(const formats::WeightSource& weights, const std::string& prefix,
                                                   const VisionTowerConfig& config, ops::Precision precision,
                                                   int num_layers_used = 0);
  ~VisionTower();

  // pixels [V, 3, S, S] f32 → hidden states [V * num_positions(), hidden_size] f32 (class
  // token first for CLIP), after `layers` encoder layers (layers ≤ the loaded count; as
  // HF's hidden_states[layers]: 0 = embeddings (CLIP: after pre_layrnorm)), with the
  // post-layernorm applied only when `post_layernorm` (HF applies it to last_hidden_state,
  // not to hidden_states[i]).
  Tensor forward(const Tensor& pixels, int layers, bool post_layernorm) const;
  // SigLIP's pooler ("<prefix>head.*": probe, multi-head attention, layernorm, MLP) on
  // forward(..., all layers, true): [V, hidden_size]. failed_precondition-free: check has_head().
  Tensor pool(const Tensor& last_hidden) const;
  bool has_head() const;

  const VisionTowerConfig& config() const;
  int num_layers_loaded() const;
  double flops_per_view(int layers) const;

 private:
  VisionTower();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::models

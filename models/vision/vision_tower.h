// models/vision/vision_tower.h: the ViT image towers of CLIP and SigLIP in their Hugging Face
// layouts (CLIPVisionModel: class token, pre-layernorm, quick_gelu; SiglipVisionModel: no
// class token, gelu_pytorch_tanh, optional attention-pooling head), loaded under any
// parameter prefix so that LLaVA ("vision_tower.vision_model."), Idefics3
// ("model.vision_model.") and the dual encoders ("vision_model.") share one implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "configs/vision_tower_config.h"
#include "formats/safetensors.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models {

class VisionTower {
 public:
  // Loads "<prefix>embeddings.patch_embedding.weight" ... "<prefix>post_layernorm.weight"
  // (CLIP also "<prefix>embeddings.class_embedding", "<prefix>pre_layrnorm.*"). Layers
  // past `num_layers_used` (when > 0) are not loaded: LLaVA reads layer -2's output and
  // never runs the last layer. not_found / invalid_argument naming a missing / misshapen tensor.
  static Result<std::unique_ptr<VisionTower>> load(const formats::WeightSource& weights, const std::string& prefix,
                                                   const configs::VisionTowerConfig& config, ops::Precision precision,
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

  const configs::VisionTowerConfig& config() const;
  int num_layers_loaded() const;
  double flops_per_view(int layers) const;

 private:
  VisionTower();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::models

// models/vision/text_tower.h: the text halves of the CLIP and SigLIP dual encoders
// (CLIPTextTransformer + text_projection, SiglipTextTransformer with its head) as an Encoder
// over the embedder's flat batch. Every token's state comes back after final_layer_norm and
// the projection (a per-token linear map), so pooling picks the model's text embedding:
//  - CLIP: causal attention; HF pools at the end-of-text token (argmax(input_ids) for the
//    openai checkpoints, whose EOS is the largest id; else the first eos_token_id). Real
//    tokenizers end every text with it, so Prism pools the LAST token and does not look ids up.
//  - SigLIP: bidirectional attention over the sequence as given, pooled at its last
//    position. The model was trained on texts padded to max_position_embeddings with
//    no attention mask: padding them is the caller's (the embed frontend pads).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "configs/hf_config.h"
#include "formats/safetensors.h"
#include "models/encoder.h"
#include "models/vision/vision_tower.h"
#include "runtime/ops.h"

namespace prism::models::vision {

// text_config of CLIPConfig / SiglipConfig, with transformers' defaults for absent keys.
struct TextTowerConfig {
  configs::VisionTowerKind kind = configs::VisionTowerKind::clip;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, max_position_embeddings = 0;
  int num_layers = 0, num_heads = 0;
  double layer_norm_eps = 1e-5;
  std::string hidden_act;
  // The projected size: CLIP's projection_dim (top level of config.json), SigLIP's
  // text_config.projection_size (default hidden_size).
  int64_t projection_size = 0;

  // text_config: config.get_object("text_config"); projection_dim: CLIP's top-level key.
  static Result<TextTowerConfig> from_hf(const configs::HfConfig& text_config, configs::VisionTowerKind kind,
                                         int64_t projection_dim);
};

// Loads "text_model.*" (+ "text_projection.weight" for CLIP; "text_model.head.*" for SigLIP).
// not_found / invalid_argument naming a missing / misshapen tensor.
Result<std::unique_ptr<Encoder>> load_text_tower(const formats::WeightSource& src, const TextTowerConfig& config,
                                                 ops::Precision precision);

}  // namespace prism::models::vision

// models/vision/dual_encoder.cpp: CLIPModel / SiglipModel directories loaded into a text
// Encoder and an ImageEmbedder. logit_scale and logit_bias are not read: Prism serves the
// embeddings, and similarity is the client's business.
#include "models/vision/dual_encoder.h"

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "configs/hf_config.h"
#include "formats/safetensors.h"
#include "models/common/transformer_layer.h"
#include "models/common/weight_loading.h"
#include "models/vision/text_tower.h"
#include "models/vision/vision_tower.h"
#include "runtime/arena.h"

namespace prism::models {
namespace {

using configs::HfConfig;
using formats::WeightSource;

constexpr char kVisionPrefix[] = "vision_model.";

// CLIP: the class token after post_layernorm, through visual_projection (no bias).
// SigLIP: the tower's attention-pooling head over the post-layernormed tokens.
class TowerImageEmbedder final : public ImageEmbedder {
 public:
  TowerImageEmbedder(std::unique_ptr<VisionTower> tower, ops::LinearWeight visual_projection)
      : tower_(std::move(tower)), visual_projection_(std::move(visual_projection)) {}

  Tensor embed_images(const Tensor& pixels) const override {
    const configs::VisionTowerConfig& c = tower_->config();
    if (pixels.dim() >= 1 && pixels.size(0) == 0) return Tensor::empty({0, embedding_size()}, DType::f32);
    Arena* const result = current_arena();
    common::ForwardArenas& arenas = common::forward_arenas();
    arenas.staging.reset();
    Tensor last;
    {
      ArenaScope scope(&arenas.staging);
      last = tower_->forward(pixels, c.num_layers, /*post_layernorm=*/true);  // [V * N, hidden]
    }
    ArenaScope scope(result);
    if (c.kind == configs::VisionTowerKind::siglip) return tower_->pool(last);
    const int64_t v = pixels.size(0);
    const Tensor cls = last.view({v, c.num_positions(), c.hidden_size}).select(1, 0);  // [V, hidden], strided rows
    return ops::linear(cls, visual_projection_);
  }
  int64_t image_size() const override { return tower_->config().image_size; }
  int64_t embedding_size() const override {
    return visual_projection_.defined() ? visual_projection_.out_features : tower_->config().hidden_size;
  }
  // NOTE: the tower (VisionTower::flops_per_view) plus, for CLIP, the projection (2 H E);
  // for SigLIP the head: k / v over N tokens (4 H² N), the probe's attention (2 N H),
  // out_proj (H²) and its MLP (2 H I); its query is a constant computed at load.
  double flops_per_image() const override {
    const configs::VisionTowerConfig& c = tower_->config();
    const double h = double(c.hidden_size), n = double(c.num_positions()), inter = double(c.intermediate_size);
    const double tail = visual_projection_.defined() ? h * double(visual_projection_.out_features)
                                                     : 2.0 * h * h * n + 2.0 * n * h + h * h + 2.0 * h * inter;
    return tower_->flops_per_view(c.num_layers) + 2.0 * tail;
  }

 private:
  std::unique_ptr<VisionTower> tower_;
  ops::LinearWeight visual_projection_;  // [projection_dim, hidden] (CLIP); undefined for SigLIP
};

Result<configs::VisionTowerKind> dual_encoder_kind(const configs::HfConfig& config) {
  PRISM_ASSIGN_OR_RETURN(const std::string model_type, config.get_string("model_type"));
  if (model_type == "clip") return configs::VisionTowerKind::clip;
  if (model_type == "siglip") return configs::VisionTowerKind::siglip;
  return unimplemented("config.json: model_type '" + model_type + "' is not a dual encoder (clip, siglip)");
}

Result<DualEncoderModel> load(const std::string& dir, ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const configs::HfConfig config, configs::HfConfig::load(dir));
  PRISM_ASSIGN_OR_RETURN(const configs::VisionTowerKind kind, dual_encoder_kind(config));
  const bool clip = kind == configs::VisionTowerKind::clip;
  PRISM_ASSIGN_OR_RETURN(const configs::HfConfig text_config, config.get_object("text_config"));
  PRISM_ASSIGN_OR_RETURN(const configs::HfConfig vision_config, config.get_object("vision_config"));
  PRISM_ASSIGN_OR_RETURN(const int64_t projection_dim, config.get_int("projection_dim", 512));  // CLIPConfig's default
  PRISM_ASSIGN_OR_RETURN(const vision::TextTowerConfig text,
                         vision::TextTowerConfig::from_hf(text_config, kind, projection_dim));
  const nlohmann::json vision_json = nlohmann::json::parse(vision_config.dump(), nullptr, /*allow_exceptions=*/false);
  PRISM_ASSIGN_OR_RETURN(const configs::VisionTowerConfig vision, configs::VisionTowerConfig::from_hf(vision_json, kind));

  PRISM_ASSIGN_OR_RETURN(const WeightSource src, WeightSource::open(dir));
  DualEncoderModel m;
  PRISM_ASSIGN_OR_RETURN(m.text, vision::load_text_tower(src, text, precision));
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<VisionTower> tower, VisionTower::load(src, kVisionPrefix, vision, precision));
  ops::LinearWeight visual_projection;
  if (clip) {
    ArenaScope no_arena(nullptr);
    PRISM_ASSIGN_OR_RETURN(visual_projection, common::load_linear(src, {"visual_projection"}, {projection_dim},
                                                                  vision.hidden_size, false, precision));
  } else if (!tower->has_head()) {
    return not_found(std::string("tensor '") + kVisionPrefix +
                     "head.probe' not in the checkpoint: a SigLIP dual encoder pools images with its head");
  }
  m.image = std::make_unique<TowerImageEmbedder>(std::move(tower), std::move(visual_projection));
  return m;
}

}  // namespace

bool is_dual_encoder(const std::string& dir) {
  const Result<configs::HfConfig> config = configs::HfConfig::load(dir);
  return config && dual_encoder_kind(*config).has_value();
}

Result<DualEncoderModel> load_dual_encoder(const std::string& dir, ops::Precision precision) {
  Result<DualEncoderModel> m = load(dir, precision);
  if (!m) return Status(m.status().code(), dir + ": " + m.status().message());
  return m;
}

}  // namespace prism::models

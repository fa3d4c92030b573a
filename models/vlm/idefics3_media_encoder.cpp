// Idefics3MediaEncoder: SigLIP tower (post-layernorm applied) + pixel shuffle + projection.
#include "models/vlm/idefics3_media_encoder.h"

#include <string>
#include <utility>

#include "models/vision/vision_tower.h"
#include "models/vlm/pixel_shuffle.h"
#include "models/vlm/projector_weights.h"

namespace prism::models {
namespace {

class Idefics3MediaEncoder final : public MediaEncoder {
 public:
  Idefics3MediaEncoder(std::unique_ptr<VisionTower> tower, int64_t scale_factor, ops::LinearWeight proj)
      : tower_(std::move(tower)), scale_factor_(scale_factor), proj_(std::move(proj)) {}

  Tensor encode(const Tensor& pixels) const override {
    const configs::VisionTowerConfig& vc = tower_->config();
    PRISM_CHECK_MSG(pixels.dim() == 4 && pixels.size(1) == vc.num_channels && pixels.size(2) == vc.image_size &&
                        pixels.size(3) == vc.image_size,
                    "Idefics3 encode: pixels must be [V, 3, image_size, image_size]");
    const int64_t v = pixels.size(0);
    const Tensor hidden = tower_->forward(pixels, tower_->num_layers_loaded(), /*post_layernorm=*/true);  // [V * N, Hv]
    const Tensor shuffled = pixel_shuffle(hidden, v, vc.grid_side(), scale_factor_);  // [V * N / s², Hv s²]
    return ops::linear(shuffled, proj_);                                              // [V * rows, H]
  }
  int64_t image_size() const override { return tower_->config().image_size; }
  int64_t grid_side() const override { return tower_->config().grid_side() / scale_factor_; }
  int64_t output_size() const override { return proj_.out_features; }
  double flops_per_view() const override {
    const double rows = double(grid_side() * grid_side());
    return tower_->flops_per_view(tower_->num_layers_loaded()) +
           2.0 * rows * double(proj_.in_features) * double(proj_.out_features);
  }

 private:
  std::unique_ptr<VisionTower> tower_;
  int64_t scale_factor_;
  ops::LinearWeight proj_;  // modality_projection.proj: [H, Hv s²], no bias
};

}  // namespace

Result<std::unique_ptr<MediaEncoder>> load_idefics3_media_encoder(const formats::WeightSource& weights,
                                                                  const configs::VlmConfig& config, const VlmWeightNames& names,
                                                                  ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const configs::VisionTowerConfig vc, config.vision_tower());
  PRISM_ASSIGN_OR_RETURN(const configs::LlamaConfig text, config.text_model());
  const int64_t s = config.scale_factor;
  if (vc.grid_side() % s != 0)
    return invalid_argument(config.origin + ": scale_factor " + std::to_string(s) + " does not divide the " +
                            std::to_string(vc.grid_side()) + "-patch side of the vision tower (image_size " +
                            std::to_string(vc.image_size) + ", patch_size " + std::to_string(vc.patch_size) + ")");
  const int64_t h = text.hidden_size;
  PRISM_ASSIGN_OR_RETURN(ops::LinearWeight proj, load_projector_linear(weights, names.projector + "proj", h,
                                                                       vc.hidden_size * s * s, false, precision));
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<VisionTower> tower,
                         VisionTower::load(weights, names.vision_tower, vc, precision));
  return std::unique_ptr<MediaEncoder>(new Idefics3MediaEncoder(std::move(tower), s, std::move(proj)));
}

}  // namespace prism::models

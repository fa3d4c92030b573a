// LlavaMediaEncoder: tower (truncated at the feature layer) + feature selection + 2-layer MLP.
#include "models/vlm/llava_media_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "models/vision/vision_tower.h"
#include "models/vlm/projector_weights.h"

namespace prism::models {
namespace {

Result<ops::Activation> projector_activation(const std::string& act, const std::string& origin) {
  if (act == "gelu") return ops::Activation::gelu_erf;
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return ops::Activation::gelu_tanh;
  if (act == "silu") return ops::Activation::silu;
  if (act == "relu") return ops::Activation::relu;
  return unimplemented(origin + ": projector_hidden_act '" + act +
                       "' is not supported (gelu, gelu_pytorch_tanh, gelu_new, silu, relu)");
}

class LlavaMediaEncoder final : public MediaEncoder {
 public:
  struct Parts {
    std::unique_ptr<VisionTower> tower;
    int feature_layers = 0;      // hidden_states index: encoder layers run
    int64_t dropped_rows = 0;    // leading rows dropped per view (the class token)
    int64_t grid_side = 0;
    ops::Activation act = ops::Activation::gelu_erf;
    ops::LinearWeight linear_1, linear_2;  // [H, Hv], [H, H]
  };
  explicit LlavaMediaEncoder(Parts parts) : p_(std::move(parts)) {}

  Tensor encode(const Tensor& pixels) const override {
    const configs::VisionTowerConfig& vc = p_.tower->config();
    PRISM_CHECK_MSG(pixels.dim() == 4 && pixels.size(1) == vc.num_channels && pixels.size(2) == vc.image_size &&
                        pixels.size(3) == vc.image_size,
                    "LLaVA encode: pixels must be [V, 3, image_size, image_size]");
    const int64_t v = pixels.size(0), positions = vc.num_positions(), hv = vc.hidden_size;
    Tensor hidden = p_.tower->forward(pixels, p_.feature_layers, /*post_layernorm=*/false);  // [V * P, Hv]
    if (p_.dropped_rows > 0) {
      const int64_t kept = positions - p_.dropped_rows;
      hidden = hidden.view({v, positions, hv}).slice(1, p_.dropped_rows, positions).contiguous().view({v * kept, hv});
    }
    const Tensor h = ops::linear(hidden, p_.linear_1, p_.act);  // [V * rows, H]
    return ops::linear(h, p_.linear_2);
  }
  int64_t image_size() const override { return p_.tower->config().image_size; }
  int64_t grid_side() const override { return p_.grid_side; }
  int64_t output_size() const override { return p_.linear_2.out_features; }
  double flops_per_view() const override {
    const double rows = double(p_.grid_side * p_.grid_side);
    const double hv = double(p_.linear_1.in_features), h = double(p_.linear_1.out_features);
    return p_.tower->flops_per_view(p_.feature_layers) + 2.0 * rows * (hv * h + h * h);
  }

 private:
  Parts p_;
};

// hidden_states[layer] needs `layer` encoder layers (negative: Python indexing over the
// num_layers + 1 states, embeddings first).
Result<int> feature_layers(const configs::VlmConfig& c, int num_layers) {
  const int layer = c.vision_feature_layer;
  if (layer < -(num_layers + 1) || layer > num_layers)
    return invalid_argument(c.origin + ": vision_feature_layer " + std::to_string(layer) + " is outside the " +
                            std::to_string(num_layers) + "-layer vision tower (valid: " +
                            std::to_string(-(num_layers + 1)) + " .. " + std::to_string(num_layers) + ")");
  return layer < 0 ? num_layers + 1 + layer : layer;
}

}  // namespace

Result<std::unique_ptr<MediaEncoder>> load_llava_media_encoder(const formats::WeightSource& weights,
                                                               const configs::VlmConfig& config, const VlmWeightNames& names,
                                                               ops::Precision precision) {
  PRISM_ASSIGN_OR_RETURN(const configs::VisionTowerConfig vc, config.vision_tower());
  PRISM_ASSIGN_OR_RETURN(const configs::LlamaConfig text, config.text_model());
  LlavaMediaEncoder::Parts p;
  PRISM_ASSIGN_OR_RETURN(p.feature_layers, feature_layers(config, vc.num_layers));
  // NOTE: "default" drops the first row of every view: CLIP's class token. What is left must
  // be a square grid for the engine's spatial pooling and the processor's row count, which
  // holds for CLIP + "default" (576 of 577) and SigLIP + "full" (all patches) only.
  p.dropped_rows = config.vision_feature_select_strategy == "default" ? 1 : 0;
  const int64_t rows = vc.num_positions() - p.dropped_rows;
  p.grid_side = int64_t(std::lround(std::sqrt(double(rows))));
  if (p.grid_side * p.grid_side != rows)
    return unimplemented(config.origin + ": vision_feature_select_strategy '" + config.vision_feature_select_strategy +
                         "' leaves " + std::to_string(rows) +
                         " rows per image, not a square grid (Prism runs CLIP towers with 'default', SigLIP with 'full')");
  PRISM_ASSIGN_OR_RETURN(p.act, projector_activation(config.projector_hidden_act, config.origin));
  const int64_t h = text.hidden_size;
  const bool bias = config.multimodal_projector_bias;
  PRISM_ASSIGN_OR_RETURN(p.linear_1, load_projector_linear(weights, names.projector + "linear_1", h, vc.hidden_size,
                                                           bias, precision));
  PRISM_ASSIGN_OR_RETURN(p.linear_2, load_projector_linear(weights, names.projector + "linear_2", h, h, bias, precision));
  // NOTE: layers past the feature layer never run (llava-1.5 reads layer -2 of 24), so they
  // are not loaded; num_layers_used 0 would mean all, hence the max with 1.
  PRISM_ASSIGN_OR_RETURN(p.tower, VisionTower::load(weights, names.vision_tower, vc, precision,
                                                    std::max(p.feature_layers, 1)));
  return std::unique_ptr<MediaEncoder>(new LlavaMediaEncoder(std::move(p)));
}

}  // namespace prism::models

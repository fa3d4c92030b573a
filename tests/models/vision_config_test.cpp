// models/vision: config.json's text_config read with transformers' defaults for the keys real
// checkpoints leave out (CLIP, SigLIP), the hidden_act mapping and clear errors. (The
// vision_config: tests/configs/vision_tower_config_test.cpp; ops::quick_gelu itself:
// tests/runtime/activation_test.cpp.)
#include <string>

#include <gtest/gtest.h>

#include "configs/hf_config.h"
#include "models/common/transformer_layer.h"
#include "models/vision/text_tower.h"
#include "runtime/ops.h"

namespace prism::models {
namespace {

using configs::VisionTowerKind;

// google/siglip-base-patch16-224's text_config: no max_position_embeddings (64), hidden_act.
TEST(TextTowerConfig, SiglipTextDefaults) {
  auto hf = configs::HfConfig::parse(R"({"hidden_size": 768, "intermediate_size": 3072,
    "model_type": "siglip_text_model", "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 32000})");
  ASSERT_TRUE(hf.has_value()) << hf.status().to_string();
  auto c = vision::TextTowerConfig::from_hf(*hf, VisionTowerKind::siglip, 0);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->max_position_embeddings, 64);
  EXPECT_EQ(c->hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c->projection_size, 768);  // the head keeps hidden_size
}

TEST(TextTowerConfig, ClipProjectsToProjectionDim) {
  auto hf = configs::HfConfig::parse(R"({"hidden_size": 512, "model_type": "clip_text_model"})");
  ASSERT_TRUE(hf.has_value()) << hf.status().to_string();
  auto c = vision::TextTowerConfig::from_hf(*hf, VisionTowerKind::clip, 512);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->max_position_embeddings, 77);
  EXPECT_EQ(c->vocab_size, 49408);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->hidden_act, "quick_gelu");
  EXPECT_EQ(c->projection_size, 512);
  auto bad = vision::TextTowerConfig::from_hf(*hf, VisionTowerKind::clip, 0);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument) << bad.status().to_string();
}

TEST(MlpActivation, HiddenActNamesMapToTheirForms) {
  auto quick = common::MlpActivation::parse("quick_gelu");
  ASSERT_TRUE(quick.has_value());
  EXPECT_EQ(quick->fused, ops::Activation::quick_gelu);  // fused into fc1, no separate pass
  EXPECT_EQ(common::MlpActivation::parse("gelu")->fused, ops::Activation::gelu_erf);
  EXPECT_EQ(common::MlpActivation::parse("gelu_pytorch_tanh")->fused, ops::Activation::gelu_tanh);
  EXPECT_EQ(common::MlpActivation::parse("gelu_new")->fused, ops::Activation::gelu_tanh);
  EXPECT_FALSE(common::MlpActivation::parse("relu").has_value());
}

}  // namespace
}  // namespace prism::models

// configs/vision_tower_config: config.json's vision_config read with transformers' defaults
// for the keys real checkpoints leave out (llava-hf, SmolVLM, CLIP, SigLIP) and clear errors.
// (The text towers and the hidden_act mapping: tests/models/vision_config_test.cpp.)
#include "configs/vision_tower_config.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace prism::configs {
namespace {

// llava-hf/llava-1.5-7b-hf's vision_config: no hidden_act, layer_norm_eps or num_channels.
constexpr char kLlavaVision[] = R"({"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
  "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14,
  "projection_dim": 768, "vocab_size": 32000})";

// HuggingFaceTB/SmolVLM-256M-Instruct's vision_config: no num_hidden_layers, intermediate_size.
constexpr char kSmolVlmVision[] = R"({"hidden_size": 768, "image_size": 512, "max_image_size": {"longest_edge": 512},
  "model_type": "smolvlm_vision", "num_attention_heads": 12, "patch_size": 16, "size": {"longest_edge": 2048},
  "tie_word_embeddings": false, "use_base_siglip": false, "vocab_size": 49152})";

// google/siglip-so400m-patch14-384's: 384 is not a multiple of 14 (the conv drops 6 pixels).
constexpr char kSiglipSo400m[] = R"({"hidden_size": 1152, "image_size": 384, "intermediate_size": 4304,
  "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14})";

Result<VisionTowerConfig> vision_config(const char* text, VisionTowerKind kind) {
  return VisionTowerConfig::from_hf(nlohmann::json::parse(text), kind);
}

TEST(VisionTowerConfig, LlavaClipTowerFillsTransformersDefaults) {
  auto c = vision_config(kLlavaVision, VisionTowerKind::clip);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->hidden_size, 1024);
  EXPECT_EQ(c->intermediate_size, 4096);
  EXPECT_EQ(c->num_layers, 24);
  EXPECT_EQ(c->num_heads, 16);
  EXPECT_EQ(c->num_channels, 3);
  EXPECT_EQ(c->hidden_act, "quick_gelu");
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-5);
  EXPECT_EQ(c->grid_side(), 24);
  EXPECT_EQ(c->num_patches(), 576);
  EXPECT_EQ(c->num_positions(), 577);  // + the class token
}

TEST(VisionTowerConfig, SmolVlmTowerUsesIdefics3Defaults) {
  auto c = vision_config(kSmolVlmVision, VisionTowerKind::siglip);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->num_layers, 12);
  EXPECT_EQ(c->intermediate_size, 3072);
  EXPECT_EQ(c->hidden_act, "gelu_pytorch_tanh");
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-6);
  EXPECT_EQ(c->grid_side(), 32);
  EXPECT_EQ(c->num_positions(), 1024);  // no class token
}

TEST(VisionTowerConfig, ImageSizeNotAMultipleOfThePatchFloorsTheGrid) {
  auto c = vision_config(kSiglipSo400m, VisionTowerKind::siglip);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->grid_side(), 27);
  EXPECT_EQ(c->num_positions(), 729);
}

TEST(VisionTowerConfig, BadValuesAreInvalidArgumentsNamingTheKey) {
  const struct {
    const char* json;
    const char* mention;
  } cases[] = {
      {R"({"hidden_size": 0})", "hidden_size"},
      {R"({"hidden_size": "wide"})", "hidden_size"},
      {R"({"hidden_size": 100, "num_attention_heads": 12})", "num_attention_heads"},
      {R"({"hidden_act": "swish"})", "swish"},
      {R"({"layer_norm_eps": -1})", "layer_norm_eps"},
      {R"({"image_size": 8, "patch_size": 16})", "patch_size"},
      {R"([1, 2])", "object"},
  };
  for (const auto& c : cases) {
    auto got = vision_config(c.json, VisionTowerKind::clip);
    ASSERT_FALSE(got.has_value()) << c.json;
    EXPECT_EQ(got.status().code(), StatusCode::invalid_argument) << got.status().to_string();
    EXPECT_NE(got.status().message().find(c.mention), std::string::npos) << got.status().to_string();
  }
}

}  // namespace
}  // namespace prism::configs

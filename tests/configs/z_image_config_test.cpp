// configs/z_image_config: transformer/config.json keys of ZImageTransformer2DModel read with
// diffusers' defaults, the derived sizes, and clear errors for what Prism cannot run.
#include "configs/z_image_config.h"

#include <string>

#include <gtest/gtest.h>

namespace prism::configs {
namespace {

// Tongyi-MAI/Z-Image-Turbo's transformer/config.json.
constexpr char kTurbo[] = R"({
  "_class_name": "ZImageTransformer2DModel", "_diffusers_version": "0.36.0.dev0",
  "all_f_patch_size": [1], "all_patch_size": [2], "axes_dims": [32, 48, 48], "axes_lens": [1536, 512, 512],
  "cap_feat_dim": 2560, "dim": 3840, "in_channels": 16, "n_heads": 30, "n_kv_heads": 30, "n_layers": 30,
  "n_refiner_layers": 2, "norm_eps": 1e-05, "qk_norm": true, "rope_theta": 256.0, "t_scale": 1000.0})";

Result<ZImageConfig> parse(const std::string& json) {
  auto hf = HfConfig::parse(json);
  if (!hf) return hf.status();
  return ZImageConfig::from_hf(*hf);
}

std::string edited(std::string json, const std::string& from, const std::string& to) {
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) json.replace(at, from.size(), to);
  return json;
}

TEST(ZImageConfig, ReadsTurbo) {
  auto c = parse(kTurbo);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->dim, 3840);
  EXPECT_EQ(c->n_heads, 30);
  EXPECT_EQ(c->head_dim(), 128);
  EXPECT_EQ(c->n_layers, 30);
  EXPECT_EQ(c->n_refiner_layers, 2);
  EXPECT_EQ(c->cap_feat_dim, 2560);
  EXPECT_EQ(c->in_channels, 16);
  EXPECT_EQ(c->ffn_hidden(), 10240);  // int(3840 / 3 * 8)
  EXPECT_EQ(c->adaln_dim(), 256);
  EXPECT_EQ(c->patch_features(), 64);
  EXPECT_EQ(c->patch_key(), "2-1");
  EXPECT_EQ(c->axes_dims, (std::vector<int64_t>{32, 48, 48}));
  EXPECT_EQ(c->axes_lens, (std::vector<int64_t>{1536, 512, 512}));
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 256.0);
  EXPECT_DOUBLE_EQ(c->t_scale, 1000.0);
  EXPECT_TRUE(c->qk_norm);
  // Caption positions 1..padded, the image at padded + 1 < 1536: 1504 tokens at most.
  EXPECT_EQ(c->max_caption_tokens(), 1504);
  EXPECT_EQ(c->max_tokens_high(), 512);
}

TEST(ZImageConfig, DefaultsForAbsentKeysAndDerivedSizes) {
  auto c = parse(R"({"dim": 64, "n_heads": 2, "axes_dims": [8, 12, 12]})");
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->n_layers, 30);
  EXPECT_EQ(c->n_refiner_layers, 2);
  EXPECT_EQ(c->cap_feat_dim, 2560);
  EXPECT_EQ(c->axes_lens, (std::vector<int64_t>{1024, 512, 512}));
  EXPECT_EQ(c->all_patch_size, (std::vector<int64_t>{2}));
  EXPECT_EQ(c->ffn_hidden(), 170);  // int(64 / 3 * 8) = int(170.67)
  EXPECT_EQ(c->adaln_dim(), 64);    // min(dim, 256)
  EXPECT_EQ(ZImageConfig::padded(7), 32);
  EXPECT_EQ(ZImageConfig::padded(64), 64);
  EXPECT_EQ(ZImageConfig::padded(65), 96);
  // n_kv_heads is read but not tied to n_heads (diffusers ignores it).
  EXPECT_TRUE(parse(R"({"dim": 16, "n_heads": 1, "n_kv_heads": 2, "axes_dims": [8, 4, 4]})").has_value());
  // Several embedder pairs: the pipeline's (2, 1) must be among them.
  EXPECT_TRUE(parse(edited(kTurbo, "\"all_f_patch_size\": [1], \"all_patch_size\": [2]",
                           "\"all_f_patch_size\": [1, 1], \"all_patch_size\": [4, 2]"))
                  .has_value());
}

void expect_error(const std::string& json, StatusCode code, const std::string& mention) {
  auto c = parse(json);
  ASSERT_FALSE(c.has_value()) << mention;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(mention), std::string::npos) << c.status().to_string();
}

TEST(ZImageConfig, ClearErrors) {
  expect_error(edited(kTurbo, "ZImageTransformer2DModel", "FluxTransformer2DModel"), StatusCode::unimplemented,
               "FluxTransformer2DModel");
  expect_error(edited(kTurbo, "\"dim\": 3840", "\"dim\": \"3840\""), StatusCode::invalid_argument, "dim");
  expect_error(edited(kTurbo, "\"n_heads\": 30", "\"n_heads\": 7"), StatusCode::invalid_argument, "n_heads");
  expect_error(edited(kTurbo, "\"n_layers\": 30", "\"n_layers\": 0"), StatusCode::invalid_argument, "n_layers");
  expect_error(edited(kTurbo, "\"axes_dims\": [32, 48, 48]", "\"axes_dims\": [32, 48, 40]"),
               StatusCode::invalid_argument, "axes_dims");
  expect_error(edited(kTurbo, "\"axes_dims\": [32, 48, 48]", "\"axes_dims\": [33, 47, 48]"),
               StatusCode::invalid_argument, "even");
  expect_error(edited(kTurbo, "\"axes_lens\": [1536, 512, 512]", "\"axes_lens\": [1536, 512]"),
               StatusCode::invalid_argument, "three entries");
  expect_error(edited(kTurbo, "\"axes_lens\": [1536, 512, 512]", "\"axes_lens\": [16, 512, 512]"),
               StatusCode::invalid_argument, "axes_lens[0]");
  expect_error(edited(kTurbo, "\"all_patch_size\": [2]", "\"all_patch_size\": [4]"), StatusCode::unimplemented,
               "all_patch_size");
  expect_error(edited(kTurbo, "\"all_f_patch_size\": [1]", "\"all_f_patch_size\": [1, 2]"),
               StatusCode::invalid_argument, "differ in length");
  expect_error(edited(kTurbo, "\"norm_eps\": 1e-05", "\"norm_eps\": 0"), StatusCode::invalid_argument, "norm_eps");
  expect_error(edited(kTurbo, "\"qk_norm\": true", "\"qk_norm\": 1"), StatusCode::invalid_argument, "qk_norm");
}

}  // namespace
}  // namespace prism::configs

// configs/vae_config: vae/config.json of diffusers' AutoencoderKL read with its defaults,
// FLUX.1's / Z-Image's values, the derived sizes (spatial factor, latent tile), and clear
// errors for what Prism's decoder cannot run.
#include "configs/vae_config.h"

#include <string>

#include <gtest/gtest.h>

#include "base/file.h"
#include "test_util/paths.h"

namespace prism::configs {
namespace {

// FLUX.1-schnell's vae/config.json (Z-Image's VAE is the same autoencoder).
constexpr char kFlux[] = R"({
  "_class_name": "AutoencoderKL", "_diffusers_version": "0.30.0.dev0", "_name_or_path": "../checkpoints/flux-schnell",
  "act_fn": "silu", "block_out_channels": [128, 256, 512, 512],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
  "force_upcast": true, "in_channels": 3, "latent_channels": 16, "latents_mean": null, "latents_std": null,
  "layers_per_block": 2, "mid_block_add_attention": true, "norm_num_groups": 32, "out_channels": 3,
  "sample_size": 1024, "scaling_factor": 0.3611, "shift_factor": 0.1159,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"],
  "use_post_quant_conv": false, "use_quant_conv": false})";

// Stable Diffusion 1.x's (stabilityai/sd-vae-ft-mse): no shift, quant convs, 4 latent channels.
constexpr char kSd[] = R"({
  "_class_name": "AutoencoderKL", "_diffusers_version": "0.4.2", "act_fn": "silu",
  "block_out_channels": [128, 256, 512, 512],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
  "in_channels": 3, "latent_channels": 4, "layers_per_block": 2, "norm_num_groups": 32, "out_channels": 3,
  "sample_size": 256,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"]})";

Result<AutoencoderKLConfig> parse(const std::string& text) {
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::parse(text));
  return AutoencoderKLConfig::from_hf(hf);
}

// text with the first `from` replaced by `to`.
std::string edited(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

void expect_error(const std::string& text, StatusCode code, const std::string& needle) {
  Result<AutoencoderKLConfig> c = parse(text);
  ASSERT_FALSE(c.has_value()) << needle;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().to_string();
}

TEST(VaeConfig, FluxVae) {
  Result<AutoencoderKLConfig> c = parse(kFlux);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->in_channels, 3);
  EXPECT_EQ(c->out_channels, 3);
  EXPECT_EQ(c->latent_channels, 16);
  EXPECT_EQ(c->block_out_channels, (std::vector<int64_t>{128, 256, 512, 512}));
  EXPECT_EQ(c->layers_per_block, 2);
  EXPECT_EQ(c->norm_num_groups, 32);
  EXPECT_EQ(c->sample_size, 1024);
  EXPECT_DOUBLE_EQ(c->scaling_factor, 0.3611);
  EXPECT_DOUBLE_EQ(c->shift_factor, 0.1159);
  EXPECT_FALSE(c->use_quant_conv);
  EXPECT_FALSE(c->use_post_quant_conv);
  EXPECT_TRUE(c->mid_block_add_attention);
  EXPECT_TRUE(c->force_upcast);
  EXPECT_EQ(c->num_blocks(), 4);
  EXPECT_EQ(c->spatial_factor(), 8);
  EXPECT_EQ(c->tile_latent_size(), 128);  // diffusers' tile_latent_min_size
}

TEST(VaeConfig, StableDiffusionVaeTakesDiffusersDefaults) {
  Result<AutoencoderKLConfig> c = parse(kSd);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->latent_channels, 4);
  EXPECT_DOUBLE_EQ(c->scaling_factor, 0.18215);  // absent: diffusers' default
  EXPECT_DOUBLE_EQ(c->shift_factor, 0.0);
  EXPECT_TRUE(c->use_post_quant_conv);
  EXPECT_TRUE(c->mid_block_add_attention);
  EXPECT_EQ(c->tile_latent_size(), 32);
  // An explicit null shift_factor is absent too.
  c = parse(edited(kFlux, "\"shift_factor\": 0.1159", "\"shift_factor\": null"));
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->shift_factor, 0.0);
}

TEST(VaeConfig, EmptyObjectIsDiffusersDefaults) {
  Result<AutoencoderKLConfig> c = parse("{}");
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->block_out_channels, (std::vector<int64_t>{64}));
  EXPECT_EQ(c->layers_per_block, 1);
  EXPECT_EQ(c->latent_channels, 4);
  EXPECT_EQ(c->sample_size, 32);
  EXPECT_EQ(c->spatial_factor(), 1);
}

TEST(VaeConfig, SampleSizeListCountsByItsFirstEntry) {
  Result<AutoencoderKLConfig> c = parse(edited(kFlux, "\"sample_size\": 1024", "\"sample_size\": [512, 768]"));
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->sample_size, 512);
  EXPECT_EQ(c->tile_latent_size(), 64);
}

TEST(VaeConfig, UnsupportedVariantsAreUnimplemented) {
  expect_error(edited(kFlux, "\"AutoencoderKL\"", "\"AutoencoderTiny\""), StatusCode::unimplemented, "AutoencoderTiny");
  expect_error(edited(kFlux, "\"act_fn\": \"silu\"", "\"act_fn\": \"gelu\""), StatusCode::unimplemented, "gelu");
  expect_error(edited(kFlux, "[\"UpDecoderBlock2D\",", "[\"AttnUpDecoderBlock2D\","), StatusCode::unimplemented,
               "AttnUpDecoderBlock2D");
  expect_error(edited(kFlux, "\"latents_mean\": null", "\"latents_mean\": [0.1, 0.2]"), StatusCode::unimplemented,
               "latents_mean");
}

TEST(VaeConfig, InvalidValuesNameTheKey) {
  expect_error(edited(kFlux, "\"norm_num_groups\": 32", "\"norm_num_groups\": 48"), StatusCode::invalid_argument,
               "block_out_channels[0] 128 is not a multiple of norm_num_groups 48");
  expect_error(edited(kFlux, "\"latent_channels\": 16", "\"latent_channels\": 0"), StatusCode::invalid_argument,
               "latent_channels");
  expect_error(edited(kFlux, "\"scaling_factor\": 0.3611", "\"scaling_factor\": 0"), StatusCode::invalid_argument,
               "scaling_factor");
  expect_error(edited(kFlux, "\"block_out_channels\": [128, 256, 512, 512]", "\"block_out_channels\": []"),
               StatusCode::invalid_argument, "block_out_channels");
  expect_error(edited(kFlux, "\"block_out_channels\": [128, 256, 512, 512]", "\"block_out_channels\": [128, 256]"),
               StatusCode::invalid_argument, "up_block_types has 4 entries");
  expect_error(edited(kFlux, "\"sample_size\": 1024", "\"sample_size\": 1020"), StatusCode::invalid_argument,
               "sample_size 1020");
  // A multiple of 8 but not of 32: 125-cell tiles would start every 93 cells (744 pixels) and
  // keep 750.
  expect_error(edited(kFlux, "\"sample_size\": 1024", "\"sample_size\": 1000"), StatusCode::invalid_argument,
               "sample_size 1000 is not a multiple of 32");
  expect_error(edited(kFlux, "\"layers_per_block\": 2", "\"layers_per_block\": \"2\""), StatusCode::invalid_argument,
               "layers_per_block");
}

TEST(VaeConfig, LoadsFromAFolderAndDetects) {
  const std::string dir = test::scratch_dir("vae_config");
  ASSERT_TRUE(write_file(dir + "/config.json", kFlux).ok());
  EXPECT_TRUE(is_autoencoder_kl(dir));
  Result<AutoencoderKLConfig> c = AutoencoderKLConfig::load(dir);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->latent_channels, 16);
  EXPECT_FALSE(is_autoencoder_kl("/nonexistent"));
  EXPECT_FALSE(AutoencoderKLConfig::load("/nonexistent").has_value());
  const std::string other = test::scratch_dir("vae_config_other");
  ASSERT_TRUE(write_file(other + "/config.json", R"({"model_type": "llama"})").ok());
  EXPECT_FALSE(is_autoencoder_kl(other));
}

}  // namespace
}  // namespace prism::configs

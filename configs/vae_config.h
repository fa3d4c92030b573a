// configs/vae_config.h: the vae/config.json of a diffusers pipeline whose autoencoder is an
// AutoencoderKL (FLUX.1's and Z-Image's 16-channel VAE, Stable Diffusion's 4-channel one),
// typed and validated: the sizes models/vae/ builds the decoder with, the latent scaling the
// pipelines undo before decoding, and the tile size diffusers' tiled decode derives from
// sample_size. Tensor-free; nothing about the encoder beyond reading past its keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "configs/hf_config.h"

namespace prism::configs {

// config.json of _class_name "AutoencoderKL": in_channels, out_channels, latent_channels,
// block_out_channels, layers_per_block, norm_num_groups, act_fn ("silu"), up_block_types (all
// "UpDecoderBlock2D"), sample_size, scaling_factor, shift_factor, use_quant_conv,
// use_post_quant_conv, mid_block_add_attention; diffusers' defaults for omitted keys. FLUX.1 /
// Z-Image: latent 16, block_out_channels [128, 256, 512, 512], layers_per_block 2, groups 32,
// sample_size 1024, scaling 0.3611, shift 0.1159, no quant convs, mid-block attention.
struct AutoencoderKLConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  int64_t latent_channels = 4;
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;  // each decoder up block has layers_per_block + 1 resnets
  int64_t norm_num_groups = 32;
  // Pixels per side of a tile in diffusers' tiled decode (its tile_sample_min_size); a list
  // in config.json counts by its first entry, as diffusers' tile_latent_min_size does.
  int64_t sample_size = 32;
  double scaling_factor = 0.18215;
  double shift_factor = 0.0;  // null or absent: 0 (Stable Diffusion's VAEs have none)
  bool use_quant_conv = true;  // encoder side: read, not used by the decoder
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  bool force_upcast = true;  // read; Prism's decoder computes in f32 regardless

  // origin names the file in messages. unimplemented for another _class_name, act_fn or up
  // block type, or for latents_mean / latents_std (an un-scaling Prism does not apply);
  // invalid_argument naming a key of the wrong type or value.
  static Result<AutoencoderKLConfig> from_hf(const HfConfig& hf, const std::string& origin = "config.json");
  // dir/config.json (dir: the pipeline's vae/ folder), or a .json path.
  static Result<AutoencoderKLConfig> load(const std::string& dir_or_file);
  // Sizes positive, every block's channels divisible by norm_num_groups, scaling_factor
  // finite and non-zero, sample_size a multiple of 4 * spatial_factor() (whole decode tiles).
  Status validate(const std::string& origin = "config.json") const;

  int64_t num_blocks() const { return int64_t(block_out_channels.size()); }
  // Image pixels per latent cell along each side: 2^(blocks - 1) (8 for FLUX's VAE).
  int64_t spatial_factor() const { return int64_t(1) << (num_blocks() - 1); }
  // Latent cells per tile side in diffusers' tiled decode (its tile_latent_min_size).
  int64_t tile_latent_size() const { return sample_size / spatial_factor(); }
};

// config.json's _class_name is "AutoencoderKL".
bool is_autoencoder_kl(const std::string& dir);

}  // namespace prism::configs

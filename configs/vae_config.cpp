// configs/vae_config.cpp: AutoencoderKLConfig, config.json keys as diffusers' AutoencoderKL
// names them, its defaults for omitted keys, and detection.
#include "configs/vae_config.h"

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace prism::configs {
namespace {

constexpr char kClassName[] = "AutoencoderKL";
constexpr char kUpBlockType[] = "UpDecoderBlock2D";

// sample_size is an int, or [height, width] in some exports; diffusers sizes the latent tile by
// its first entry, so the first entry is taken.
Result<int64_t> read_sample_size(const HfConfig& hf, int64_t fallback) {
  if (!hf.has("sample_size")) return fallback;
  if (!hf.object().at("sample_size").is_array()) return hf.get_int("sample_size");
  PRISM_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, hf.get_ints("sample_size"));
  if (sizes.empty()) return invalid_argument(hf.origin() + ": sample_size must not be an empty list");
  return sizes[0];
}

}  // namespace

Result<AutoencoderKLConfig> AutoencoderKLConfig::from_hf(const HfConfig& hf, const std::string& origin) {
  PRISM_ASSIGN_OR_RETURN(const std::string class_name, hf.get_string("_class_name", kClassName));
  if (class_name != kClassName)
    return unimplemented(origin + ": _class_name '" + class_name + "' is not supported (" + kClassName + ")");
  AutoencoderKLConfig c;
  PRISM_ASSIGN_OR_RETURN(c.in_channels, hf.get_int("in_channels", c.in_channels));
  PRISM_ASSIGN_OR_RETURN(c.out_channels, hf.get_int("out_channels", c.out_channels));
  PRISM_ASSIGN_OR_RETURN(c.latent_channels, hf.get_int("latent_channels", c.latent_channels));
  if (hf.has("block_out_channels")) {
    PRISM_ASSIGN_OR_RETURN(c.block_out_channels, hf.get_ints("block_out_channels"));
  }
  PRISM_ASSIGN_OR_RETURN(c.layers_per_block, hf.get_int("layers_per_block", c.layers_per_block));
  PRISM_ASSIGN_OR_RETURN(c.norm_num_groups, hf.get_int("norm_num_groups", c.norm_num_groups));
  PRISM_ASSIGN_OR_RETURN(c.sample_size, read_sample_size(hf, c.sample_size));
  PRISM_ASSIGN_OR_RETURN(c.scaling_factor, hf.get_float("scaling_factor", c.scaling_factor));
  PRISM_ASSIGN_OR_RETURN(c.shift_factor, hf.get_float("shift_factor", c.shift_factor));
  PRISM_ASSIGN_OR_RETURN(c.use_quant_conv, hf.get_bool("use_quant_conv", c.use_quant_conv));
  PRISM_ASSIGN_OR_RETURN(c.use_post_quant_conv, hf.get_bool("use_post_quant_conv", c.use_post_quant_conv));
  PRISM_ASSIGN_OR_RETURN(c.mid_block_add_attention, hf.get_bool("mid_block_add_attention", c.mid_block_add_attention));
  PRISM_ASSIGN_OR_RETURN(c.force_upcast, hf.get_bool("force_upcast", c.force_upcast));
  // diffusers' get_activation maps both names to nn.SiLU.
  PRISM_ASSIGN_OR_RETURN(const std::string act_fn, hf.get_string("act_fn", "silu"));
  if (act_fn != "silu" && act_fn != "swish")
    return unimplemented(origin + ": act_fn '" + act_fn + "' is not supported (silu)");
  if (hf.has("up_block_types")) {
    PRISM_ASSIGN_OR_RETURN(const std::vector<std::string> types, hf.get_strings("up_block_types"));
    for (const std::string& t : types)
      if (t != kUpBlockType)
        return unimplemented(origin + ": up_block_types '" + t + "' is not supported (" + kUpBlockType + ")");
    if (int64_t(types.size()) != int64_t(c.block_out_channels.size()))
      return invalid_argument(origin + ": up_block_types has " + std::to_string(types.size()) +
                              " entries, block_out_channels " + std::to_string(c.block_out_channels.size()));
  }
  // NOTE: latents_mean / latents_std make some pipelines un-scale per channel
  // (latents * std / scaling_factor + mean); decoding without it would give wrong colours, so
  // such a VAE is refused rather than decoded wrongly.
  for (const char* key : {"latents_mean", "latents_std"})
    if (hf.has(key)) return unimplemented(origin + ": " + key + " is not supported (per-channel latent un-scaling)");
  PRISM_RETURN_IF_ERROR(c.validate(origin));
  return c;
}

Result<AutoencoderKLConfig> AutoencoderKLConfig::load(const std::string& dir_or_file) {
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::load(dir_or_file));
  return from_hf(hf, hf.origin());
}

Status AutoencoderKLConfig::validate(const std::string& origin) const {
  auto positive = [&](int64_t v, const std::string& key) -> Status {
    if (v <= 0) return invalid_argument(origin + ": " + key + " must be positive, got " + std::to_string(v));
    return Status();
  };
  PRISM_RETURN_IF_ERROR(positive(in_channels, "in_channels"));
  PRISM_RETURN_IF_ERROR(positive(out_channels, "out_channels"));
  PRISM_RETURN_IF_ERROR(positive(latent_channels, "latent_channels"));
  PRISM_RETURN_IF_ERROR(positive(norm_num_groups, "norm_num_groups"));
  PRISM_RETURN_IF_ERROR(positive(sample_size, "sample_size"));
  if (layers_per_block < 0)
    return invalid_argument(origin + ": layers_per_block must not be negative, got " + std::to_string(layers_per_block));
  // 2^(blocks - 1) must fit: a 16-block VAE does not exist, a typo does.
  if (block_out_channels.empty() || block_out_channels.size() > 16)
    return invalid_argument(origin + ": block_out_channels must have 1 to 16 entries, got " +
                            std::to_string(block_out_channels.size()));
  for (size_t i = 0; i < block_out_channels.size(); ++i) {
    const std::string key = "block_out_channels[" + std::to_string(i) + "]";
    PRISM_RETURN_IF_ERROR(positive(block_out_channels[i], key));
    if (block_out_channels[i] % norm_num_groups != 0)
      return invalid_argument(origin + ": " + key + " " + std::to_string(block_out_channels[i]) +
                              " is not a multiple of norm_num_groups " + std::to_string(norm_num_groups));
  }
  if (!std::isfinite(scaling_factor) || scaling_factor == 0.0)
    return invalid_argument(origin + ": scaling_factor must be finite and non-zero, got " +
                            std::to_string(scaling_factor));
  if (!std::isfinite(shift_factor))
    return invalid_argument(origin + ": shift_factor must be finite");
  // NOTE: diffusers' tiles of sample_size / f latent cells start every 3/4 tile and keep all
  // but their last 1/4 in pixels; both are whole, and equal, only when the latent tile is a
  // multiple of 4 cells. Checked here so that decoding with the default tiles cannot fail.
  if (sample_size % (4 * spatial_factor()) != 0)
    return invalid_argument(origin + ": sample_size " + std::to_string(sample_size) + " is not a multiple of " +
                            std::to_string(4 * spatial_factor()) +
                            " (4 x 2^(blocks - 1)): its decode tiles would not cover the image");
  return Status();
}

bool is_autoencoder_kl(const std::string& dir) {
  Result<HfConfig> hf = HfConfig::load(dir);
  if (!hf) return false;
  Result<std::string> class_name = hf->get_string("_class_name");
  return class_name && *class_name == kClassName;
}

}  // namespace prism::configs

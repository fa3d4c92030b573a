// configs/z_image_config.cpp: ZImageConfig, transformer/config.json keys as diffusers'
// ZImageTransformer2DModel names them, with its defaults for absent keys.
#include "configs/z_image_config.h"

#include <numeric>

namespace prism::configs {
namespace {

Result<std::vector<int64_t>> ints_or(const HfConfig& hf, const std::string& key, std::vector<int64_t> fallback) {
  if (!hf.has(key)) return fallback;
  return hf.get_ints(key);
}

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::string ZImageConfig::patch_key() const {
  return std::to_string(kPatchSize) + "-" + std::to_string(kFramePatchSize);
}

Result<ZImageConfig> ZImageConfig::from_hf(const HfConfig& hf) {
  ZImageConfig c;
  // diffusers writes _class_name; a hand-made config may omit it.
  PRISM_ASSIGN_OR_RETURN(const std::string class_name, hf.get_string("_class_name", "ZImageTransformer2DModel"));
  if (class_name != "ZImageTransformer2DModel")
    return unimplemented("config.json: _class_name '" + class_name +
                         "' is not a Z-Image transformer (ZImageTransformer2DModel)");
  PRISM_ASSIGN_OR_RETURN(c.all_patch_size, ints_or(hf, "all_patch_size", c.all_patch_size));
  PRISM_ASSIGN_OR_RETURN(c.all_f_patch_size, ints_or(hf, "all_f_patch_size", c.all_f_patch_size));
  PRISM_ASSIGN_OR_RETURN(c.in_channels, hf.get_int("in_channels", c.in_channels));
  PRISM_ASSIGN_OR_RETURN(c.dim, hf.get_int("dim", c.dim));
  PRISM_ASSIGN_OR_RETURN(c.n_layers, hf.get_int("n_layers", c.n_layers));
  PRISM_ASSIGN_OR_RETURN(c.n_refiner_layers, hf.get_int("n_refiner_layers", c.n_refiner_layers));
  PRISM_ASSIGN_OR_RETURN(c.n_heads, hf.get_int("n_heads", c.n_heads));
  PRISM_ASSIGN_OR_RETURN(c.n_kv_heads, hf.get_int("n_kv_heads", c.n_kv_heads));
  PRISM_ASSIGN_OR_RETURN(c.norm_eps, hf.get_float("norm_eps", c.norm_eps));
  PRISM_ASSIGN_OR_RETURN(c.qk_norm, hf.get_bool("qk_norm", c.qk_norm));
  PRISM_ASSIGN_OR_RETURN(c.cap_feat_dim, hf.get_int("cap_feat_dim", c.cap_feat_dim));
  PRISM_ASSIGN_OR_RETURN(c.rope_theta, hf.get_float("rope_theta", c.rope_theta));
  PRISM_ASSIGN_OR_RETURN(c.t_scale, hf.get_float("t_scale", c.t_scale));
  PRISM_ASSIGN_OR_RETURN(c.axes_dims, ints_or(hf, "axes_dims", c.axes_dims));
  PRISM_ASSIGN_OR_RETURN(c.axes_lens, ints_or(hf, "axes_lens", c.axes_lens));
  PRISM_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<ZImageConfig> ZImageConfig::load(const std::string& dir_or_file) {
  PRISM_ASSIGN_OR_RETURN(const HfConfig hf, HfConfig::load(dir_or_file));
  return from_hf(hf);
}

Status ZImageConfig::validate() const {
  auto positive = [](int64_t v, const char* key) -> Status {
    if (v <= 0)
      return invalid_argument(std::string("config.json: ") + key + " must be positive, got " + std::to_string(v));
    return Status();
  };
  PRISM_RETURN_IF_ERROR(positive(in_channels, "in_channels"));
  PRISM_RETURN_IF_ERROR(positive(dim, "dim"));
  PRISM_RETURN_IF_ERROR(positive(n_layers, "n_layers"));
  if (n_refiner_layers < 0)
    return invalid_argument("config.json: n_refiner_layers must not be negative, got " + std::to_string(n_refiner_layers));
  PRISM_RETURN_IF_ERROR(positive(n_heads, "n_heads"));
  PRISM_RETURN_IF_ERROR(positive(n_kv_heads, "n_kv_heads"));
  PRISM_RETURN_IF_ERROR(positive(cap_feat_dim, "cap_feat_dim"));
  if (!(norm_eps > 0)) return invalid_argument("config.json: norm_eps must be positive");
  if (!(rope_theta > 0)) return invalid_argument("config.json: rope_theta must be positive");
  if (!(t_scale > 0)) return invalid_argument("config.json: t_scale must be positive");
  if (all_patch_size.size() != all_f_patch_size.size())
    return invalid_argument("config.json: all_patch_size " + list(all_patch_size) + " and all_f_patch_size " +
                            list(all_f_patch_size) + " differ in length");
  bool has_pair = false;
  for (size_t i = 0; i < all_patch_size.size(); ++i)
    has_pair |= all_patch_size[i] == kPatchSize && all_f_patch_size[i] == kFramePatchSize;
  if (!has_pair)
    return unimplemented("config.json: all_patch_size " + list(all_patch_size) + " / all_f_patch_size " +
                         list(all_f_patch_size) + " lack the pair the pipeline runs (patch " +
                         std::to_string(kPatchSize) + ", f_patch " + std::to_string(kFramePatchSize) + ")");
  if (dim % n_heads != 0)
    return invalid_argument("config.json: dim " + std::to_string(dim) + " is not a multiple of n_heads " +
                            std::to_string(n_heads));
  // The position ids have three axes (frame or caption index, row, column).
  if (axes_dims.size() != 3 || axes_lens.size() != 3)
    return invalid_argument("config.json: axes_dims " + list(axes_dims) + " and axes_lens " + list(axes_lens) +
                            " must have three entries each");
  for (size_t a = 0; a < 3; ++a) {
    if (axes_dims[a] < 0 || axes_dims[a] % 2 != 0)
      return invalid_argument("config.json: axes_dims " + list(axes_dims) + " must be even and not negative");
    if (axes_lens[a] <= 0) return invalid_argument("config.json: axes_lens " + list(axes_lens) + " must be positive");
  }
  const int64_t rope_dims = std::accumulate(axes_dims.begin(), axes_dims.end(), int64_t(0));
  if (rope_dims != head_dim())
    return invalid_argument("config.json: axes_dims " + list(axes_dims) + " sum to " + std::to_string(rope_dims) +
                            ", not the head dim dim / n_heads = " + std::to_string(head_dim()));
  // Room for a one-token caption and the image position after it.
  if (axes_lens[0] < kSeqMultiple + 2)
    return invalid_argument("config.json: axes_lens[0] " + std::to_string(axes_lens[0]) +
                            " leaves no room for a caption (needs " + std::to_string(kSeqMultiple + 2) + ")");
  if (ffn_hidden() <= 0) return invalid_argument("config.json: dim " + std::to_string(dim) + " leaves no FFN width");
  return Status();
}

}  // namespace prism::configs

// configs/z_image_config.h: the transformer/config.json of a Z-Image diffusion transformer
// (diffusers' ZImageTransformer2DModel: Z-Image, Z-Image-Turbo), typed and validated.
// Hyper-parameters only: no weights, no scheduler or guidance settings (those are the
// pipeline's), no serving knobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "configs/hf_config.h"

namespace prism::configs {

struct ZImageConfig {
  // Keys and defaults as ZImageTransformer2DModel.__init__ names them.
  std::vector<int64_t> all_patch_size{2};    // spatial patch of each (patch, f_patch) embedder pair
  std::vector<int64_t> all_f_patch_size{1};  // frame patch of each pair
  int64_t in_channels = 16;                  // latent channels (= out channels)
  int64_t dim = 3840;
  int64_t n_layers = 30;          // main (unified-sequence) blocks
  int64_t n_refiner_layers = 2;   // noise_refiner and context_refiner blocks, each
  int64_t n_heads = 30;
  // Read and checked positive, otherwise unused: diffusers' attention gives k and v n_heads
  // heads whatever this says.
  int64_t n_kv_heads = 30;
  double norm_eps = 1e-5;  // the blocks' and cap_embedder's RMSNorms (q/k norms use 1e-5 always)
  bool qk_norm = true;
  int64_t cap_feat_dim = 2560;  // the text encoder's hidden size
  double rope_theta = 256.0;
  double t_scale = 1000.0;  // model time in [0, 1] is multiplied by this before the sinusoid
  std::vector<int64_t> axes_dims{32, 48, 48};    // RoPE dims of (caption/frame index, row, column)
  std::vector<int64_t> axes_lens{1024, 512, 512};  // positions each axis's table holds

  // The (patch, f_patch) pair the pipeline runs: diffusers' forward defaults (2, 1), which
  // ZImagePipeline never overrides.
  static constexpr int64_t kPatchSize = 2;
  static constexpr int64_t kFramePatchSize = 1;
  // Caption and image token counts are padded to multiples of this (SEQ_MULTI_OF).
  static constexpr int64_t kSeqMultiple = 32;
  // Width of the timestep embedding and the adaLN inputs cap (ADALN_EMBED_DIM).
  static constexpr int64_t kAdalnEmbedDim = 256;
  static constexpr int64_t kTimestepFrequencies = 256;  // sinusoid width
  static constexpr int64_t kTimestepMlpHidden = 1024;   // t_embedder.mlp.0 out

  // invalid_argument / not_found naming the key for a bad or missing value; unimplemented
  // for another _class_name or a patch pair Prism does not run.
  static Result<ZImageConfig> from_hf(const HfConfig& hf);
  // dir/config.json (a transformer/ folder), or a .json path.
  static Result<ZImageConfig> load(const std::string& dir_or_file);
  Status validate() const;

  int64_t head_dim() const { return dim / n_heads; }
  // FeedForward hidden width: Python's int(dim / 3 * 8) (float division, truncated).
  int64_t ffn_hidden() const { return int64_t(double(dim) / 3.0 * 8.0); }
  int64_t adaln_dim() const { return dim < kAdalnEmbedDim ? dim : kAdalnEmbedDim; }
  int64_t patch_features() const { return kFramePatchSize * kPatchSize * kPatchSize * in_channels; }
  // The diffusers ModuleDict key of the pair Prism runs: "2-1".
  std::string patch_key() const;
  static int64_t padded(int64_t n) { return (n + kSeqMultiple - 1) / kSeqMultiple * kSeqMultiple; }
  // The longest caption whose positions fit the RoPE tables: caption token i sits at
  // position 1 + i and the image after the padded caption at padded + 1, on axis 0.
  int64_t max_caption_tokens() const { return (axes_lens[0] - 2) / kSeqMultiple * kSeqMultiple; }
  // The most latent tokens along height (axis 1) and width (axis 2).
  int64_t max_tokens_high() const { return axes_lens[1]; }
  int64_t max_tokens_wide() const { return axes_lens[2]; }
};

}  // namespace prism::configs

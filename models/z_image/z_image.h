// models/z_image/z_image.h: the Z-Image diffusion transformer (diffusers'
// ZImageTransformer2DModel: Z-Image, Z-Image-Turbo), loaded by its checkpoint names from a
// transformer/ folder, and the Denoiser it is to engines. ZImageTransformer computes in the
// network's own conventions (model time t = 1 - sigma, output = -velocity), as diffusers'
// forward does; the Denoiser converts at its edges so engines never see them. Computes only:
// no step loop, sampler, guidance or text encoding here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "configs/z_image_config.h"
#include "models/denoiser.h"
#include "runtime/ops.h"

namespace prism::models {

struct ZImageWeights;    // models/z_image/z_image.cpp
struct ZImagePlan;       // models/z_image/z_image.cpp: what a pass derives from its rows' shapes alone
struct ZImagePlanCache;  // models/z_image/z_image.cpp: the plans of the shapes seen last

// The pass between begin() and end(). hidden is the unified sequence; the rest is the
// model's own (engines see only DenoiseState::hidden).
struct ZImageState : DenoiseState {
  struct Row {
    int64_t frames = 0, height = 0, width = 0;  // the latent's F, H, W
    int64_t image_tokens = 0;   // F * H/2 * W/2
    int64_t image_padded = 0;   // image_tokens rounded up to 32
    int64_t cap_padded = 0;     // caption tokens rounded up to 32
    int64_t start = 0;          // the row's first token in hidden
  };
  std::vector<Row> rows;
  Tensor t_emb;       // [B, min(dim, 256)] f32: the timestep embedding (adaLN input)
  Tensor cu_seqlens;  // [B + 1] i32: rows of hidden
  Tensor positions;   // [T] i32: 0..T-1, each token's row of rope
  ops::RopeTable rope;  // cos, sin [T, head_dim / 2]: each token's three-axis rotation
  std::vector<Dims> latent_shapes;  // per row, the shape end() returns (the Denoiser's)
  std::shared_ptr<const ZImagePlan> plan;  // the rows' shapes' plan: cu_seqlens, positions, rope point into it
};

// Which fused kernels the pass runs and whether it keeps a plan per shape. All on by default;
// each off restores the earlier path, which gives the same floats (tests compare the two bit
// for bit). Kept so a bench can time both in one process.
struct ZImageKernels {
  // ops::rms_norm_rope_ in place on the q and k views of the packed QKV output. Off: rms_norm
  // (a contiguous copy of q and of k), then apply_rope over each.
  bool qk_norm_rope = true;
  // The adaLN weights of all rows as one [B, dim] tensor per norm, ops::rms_norm_segments
  // before attention and FFN and the one-pass gated residual ops::add_rms_norm_ after them.
  // Off: rms_norm per row copied into a [T, dim] tensor; rms_norm then add_ per row.
  bool segmented_norms = true;
  // The shape's plan (cu_seqlens, positions, rotation table, token indices) built once and
  // reused; the refiners' streams in a per-thread arena. Off: all rebuilt, and the streams
  // heap-allocated, at every begin().
  bool static_plan = true;
  // Attention at ops::AttentionPrecision::bf16 when the linears are bf16 or int8 (f32 linears
  // keep f32 attention either way). Off: f32 attention. Unlike the switches above this one
  // changes the floats (within the bf16 parity bounds).
  bool bf16_attention = true;
};

// One row of diffusers' forward: x[i], t[i], cap_feats[i].
struct ZImageRow {
  Tensor x;          // [C, F, H, W] f32 (F = 1 for images); H, W multiples of the patch (2)
  float t = 0;       // model time: 0 = pure noise, 1 = data (the pipeline's (1000 - t) / 1000)
  Tensor cap_feats;  // [L, cap_feat_dim] f32, L >= 1: the text encoder's states
};

// 2 x multiply-adds of one row: `image_tokens` latent tokens (after patchify) and
// `cap_tokens` caption tokens, each padded to a multiple of 32 as the model pads them.
double z_image_flops(const configs::ZImageConfig& c, int64_t image_tokens, int64_t cap_tokens);

class ZImageTransformer {
 public:
  ZImageTransformer(configs::ZImageConfig config, std::unique_ptr<ZImageWeights> weights);
  ~ZImageTransformer();

  // diffusers' forward over a batch of rows: per row [C, F, H, W] f32, the raw network
  // output (the pipeline negates it into a velocity). Rows may differ in caption length and
  // latent size; they run as one flat batch (cu_seqlens), padded only to the model's own
  // multiples of 32.
  std::vector<Tensor> forward(const std::vector<ZImageRow>& rows) const;

  // The same pass in three parts (models/denoiser.h): begin() embeds the rows, runs the noise
  // and context refiners and lays out the unified sequence (per row: image tokens, then
  // caption tokens, each padded to a multiple of 32) in state.hidden [T, dim]; run_layers()
  // runs `layers[first:last]` on it in place; end() runs the final layer and unpatchifies.
  // Results of begin() (the state) live in the caller's arena; intermediates in the
  // per-thread scratch arena.
  std::unique_ptr<ZImageState> begin(const std::vector<ZImageRow>& rows) const;
  void run_layers(ZImageState& state, int first, int last) const;
  std::vector<Tensor> end(ZImageState& state) const;

  const configs::ZImageConfig& config() const { return c_; }
  // For benches and tests comparing the paths; not while a pass runs.
  void set_kernels(const ZImageKernels& kernels) { kernels_ = kernels; }
  const ZImageKernels& kernels() const { return kernels_; }
  double flops(int64_t image_tokens, int64_t cap_tokens) const { return z_image_flops(c_, image_tokens, cap_tokens); }
  int64_t weight_bytes() const;  // what one pass streams of the packed linears

 private:
  // The plan of these rows' shapes: the cached one (static_plan) or a fresh one.
  std::shared_ptr<const ZImagePlan> plan_for(const std::vector<ZImageRow>& rows) const;

  configs::ZImageConfig c_;
  std::unique_ptr<ZImageWeights> w_;
  ZImageKernels kernels_;
  std::unique_ptr<ZImagePlanCache> plans_;
};

// dir: a Z-Image model directory (model_index.json naming a transformer/ folder) or the
// transformer folder itself (config.json + diffusion_pytorch_model.safetensors, its sharded
// .index.json, or model.safetensors). precision applies to the linear layers of the blocks,
// the patch embedder and the final layer; t_embedder and cap_embedder stay f32 (diffusers
// keeps them out of reduced-precision casting too). Errors name the file and key or tensor:
// the config's (configs::ZImageConfig), a missing tensor (not_found) or a misshapen one
// (invalid_argument, both shapes), prefixed with the folder.
Result<std::unique_ptr<ZImageTransformer>> load_z_image_transformer(const std::string& dir, ops::Precision precision);

// The Denoiser engines drive: sigma -> t = 1 - sigma on the way in, velocity = -output on the
// way out; a row's latent may be [C, H, W] (an image: F = 1 added and dropped) or [C, F, H, W].
std::unique_ptr<Denoiser> make_z_image_denoiser(std::unique_ptr<ZImageTransformer> transformer);
Result<std::unique_ptr<Denoiser>> load_z_image(const std::string& dir, ops::Precision precision);

}  // namespace prism::models

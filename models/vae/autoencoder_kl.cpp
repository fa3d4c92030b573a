// models/vae/autoencoder_kl.cpp: AutoencoderKL's decoder as a straight line of runtime ops
// over one image ([1, C, H, W] f32, NCHW as the checkpoint's convolutions expect), weights read
// by their diffusers names, and the tiled decode that blends overlapping tiles the way
// diffusers' blend_v / blend_h do. No loops over requests, no image encoding.
#include "models/vae/autoencoder_kl.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "models/common/weight_loading.h"
#include "runtime/arena.h"
#include "runtime/ops.h"

namespace prism::models {
namespace {

using formats::WeightSource;

constexpr float kEps = 1e-6f;  // every GroupNorm of the decoder (resnets, attention, conv_norm_out)
// Scores of at most this many f32 per query chunk of the mid-block attention (64 MiB), so a
// 128 x 128 latent's 16384 x 16384 score matrix (1 GiB) is never whole.
constexpr int64_t kMaxScoreFloats = int64_t(16) << 20;

// Square kernels, stride 1, padding k / 2 (sizes kept). Packed at load, or (pack_convs off)
// the checkpoint's tensors for the plain ops::conv2d.
struct Conv {
  ops::ConvWeight packed;
  Tensor weight;  // [out, in, k, k] f32; only when not packed
  Tensor bias;    // [out] f32; only when not packed
  bool defined() const { return packed.defined() || weight.defined(); }
};

struct GroupNormWeights {
  Tensor weight, bias;  // [C] f32
};

// ResnetBlock2D without a time embedding: norm1, conv1, norm2, conv2, and a 1x1 conv_shortcut
// when the channels change (undefined otherwise).
struct Resnet {
  GroupNormWeights norm1, norm2;
  Conv conv1, conv2, conv_shortcut;
};

// The mid block's single-head Attention over H*W positions.
struct Attention {
  GroupNormWeights group_norm;
  ops::LinearWeight to_qkv;  // to_q, to_k, to_v stacked along out: [3 C, C], rows q, k, v
  ops::LinearWeight to_out;  // to_out.0: [C, C]
};

struct UpBlock {
  std::vector<Resnet> resnets;  // layers_per_block + 1
  Conv upsampler;               // upsamplers.0.conv, 3x3; undefined in the last block
};

}  // namespace

struct AutoencoderKLDecoder::Weights {
  Conv post_quant_conv;  // 1x1 [L, L]; undefined unless use_post_quant_conv
  Conv conv_in;          // [C_top, L, 3, 3]
  Resnet mid_resnet0, mid_resnet1;
  std::optional<Attention> mid_attention;  // when mid_block_add_attention
  std::vector<UpBlock> up_blocks;          // block_out_channels reversed
  GroupNormWeights conv_norm_out;          // [block_out_channels[0]]
  Conv conv_out;                           // [out_channels, block_out_channels[0], 3, 3]
};

namespace {

using Weights = AutoencoderKLDecoder::Weights;

// ---- loading ----------------------------------------------------------------------------------

// What load_conv needs besides names and shapes; one per load.
struct ConvLoad {
  const WeightSource& src;
  const AutoencoderKLLoadOptions& options;
};

Result<Conv> load_conv(const ConvLoad& l, const std::string& p, int64_t out, int64_t in, int64_t k) {
  Conv c;
  PRISM_ASSIGN_OR_RETURN(c.weight, common::load_f32(l.src, p + ".weight", {out, in, k, k}));
  PRISM_ASSIGN_OR_RETURN(c.bias, common::load_f32(l.src, p + ".bias", {out}));
  if (!l.options.pack_convs) return c;
  const int pad = int(k / 2);
  PRISM_ASSIGN_OR_RETURN(c.packed, ops::pack_conv2d(c.weight, c.bias, {.padding_h = pad, .padding_w = pad},
                                                    l.options.conv_precision));
  c.weight = Tensor();  // the packed copy is the only one kept
  c.bias = Tensor();
  return c;
}

Result<GroupNormWeights> load_norm(const WeightSource& src, const std::string& p, int64_t channels) {
  GroupNormWeights n;
  PRISM_ASSIGN_OR_RETURN(n.weight, common::load_f32(src, p + ".weight", {channels}));
  PRISM_ASSIGN_OR_RETURN(n.bias, common::load_f32(src, p + ".bias", {channels}));
  return n;
}

Result<Resnet> load_resnet(const ConvLoad& l, const std::string& p, int64_t in, int64_t out) {
  Resnet r;
  PRISM_ASSIGN_OR_RETURN(r.norm1, load_norm(l.src, p + "norm1", in));
  PRISM_ASSIGN_OR_RETURN(r.conv1, load_conv(l, p + "conv1", out, in, 3));
  PRISM_ASSIGN_OR_RETURN(r.norm2, load_norm(l.src, p + "norm2", out));
  PRISM_ASSIGN_OR_RETURN(r.conv2, load_conv(l, p + "conv2", out, out, 3));
  if (in != out) {
    PRISM_ASSIGN_OR_RETURN(r.conv_shortcut, load_conv(l, p + "conv_shortcut", out, in, 1));
  }
  return r;
}

Result<Attention> load_attention(const WeightSource& src, const std::string& p, int64_t channels) {
  Attention a;
  PRISM_ASSIGN_OR_RETURN(a.group_norm, load_norm(src, p + "group_norm", channels));
  const DType dtype = common::stored_float_dtype(src, p + "to_q.weight");
  PRISM_ASSIGN_OR_RETURN(a.to_qkv, common::load_linear(src, {p + "to_q", p + "to_k", p + "to_v"},
                                                       {channels, channels, channels}, channels, true,
                                                       ops::Precision::f32, dtype));
  PRISM_ASSIGN_OR_RETURN(a.to_out, common::load_linear(src, {p + "to_out.0"}, {channels}, channels, true,
                                                       ops::Precision::f32, dtype));
  return a;
}

Result<Weights> load_weights(const WeightSource& src, const configs::AutoencoderKLConfig& c,
                             const AutoencoderKLLoadOptions& options) {
  const std::vector<int64_t>& ch = c.block_out_channels;
  const int64_t top = ch.back(), latent = c.latent_channels;
  const ConvLoad l{src, options};
  Weights w;
  if (c.use_post_quant_conv) {
    PRISM_ASSIGN_OR_RETURN(w.post_quant_conv, load_conv(l, "post_quant_conv", latent, latent, 1));
  }
  PRISM_ASSIGN_OR_RETURN(w.conv_in, load_conv(l, "decoder.conv_in", top, latent, 3));
  PRISM_ASSIGN_OR_RETURN(w.mid_resnet0, load_resnet(l, "decoder.mid_block.resnets.0.", top, top));
  if (c.mid_block_add_attention) {
    PRISM_ASSIGN_OR_RETURN(w.mid_attention, load_attention(src, "decoder.mid_block.attentions.0.", top));
  }
  PRISM_ASSIGN_OR_RETURN(w.mid_resnet1, load_resnet(l, "decoder.mid_block.resnets.1.", top, top));
  int64_t prev = top;
  for (int64_t i = 0; i < c.num_blocks(); ++i) {
    const int64_t out = ch[size_t(c.num_blocks() - 1 - i)];
    const std::string p = "decoder.up_blocks." + std::to_string(i) + ".";
    UpBlock block;
    for (int64_t j = 0; j <= c.layers_per_block; ++j) {
      PRISM_ASSIGN_OR_RETURN(Resnet r,
                             load_resnet(l, p + "resnets." + std::to_string(j) + ".", j == 0 ? prev : out, out));
      block.resnets.push_back(std::move(r));
    }
    if (i + 1 < c.num_blocks()) {  // the last block keeps its resolution
      PRISM_ASSIGN_OR_RETURN(block.upsampler, load_conv(l, p + "upsamplers.0.conv", out, out, 3));
    }
    w.up_blocks.push_back(std::move(block));
    prev = out;
  }
  PRISM_ASSIGN_OR_RETURN(w.conv_norm_out, load_norm(src, "decoder.conv_norm_out", ch[0]));
  PRISM_ASSIGN_OR_RETURN(w.conv_out, load_conv(l, "decoder.conv_out", c.out_channels, ch[0], 3));
  return w;
}


// ---- the forward pass -------------------------------------------------------------------------

Tensor conv(const Tensor& x, const Conv& c) {
  if (c.packed.defined()) return ops::conv2d(x, c.packed);
  const int pad = int(c.weight.size(2) / 2);  // 3x3 convs pad 1, 1x1 pad 0: sizes kept
  return ops::conv2d(x, c.weight, c.bias, {.padding_h = pad, .padding_w = pad});
}

Tensor group_norm(const Tensor& x, const GroupNormWeights& n, int64_t groups, bool silu) {
  return ops::group_norm(x, n.weight, n.bias, groups, kEps, silu);
}

// x: [1, C_in, H, W] -> [1, C_out, H, W]: shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x)))))).
Tensor resnet(const Tensor& x, const Resnet& r, int64_t groups) {
  Tensor h = conv(group_norm(x, r.norm1, groups, true), r.conv1);  // [1, C_out, H, W]
  h = conv(group_norm(h, r.norm2, groups, true), r.conv2);         // dropout: identity at inference
  ops::add_(h, r.conv_shortcut.defined() ? conv(x, r.conv_shortcut) : x);
  return h;
}

// x: [1, C, H, W], updated in place: x += to_out(softmax(q k^T / sqrt(C)) v), one head of width
// C over the T = H * W positions, q, k, v = to_q/k/v(group_norm(x)) as [T, C] rows.
// NOTE: the score matrix [T, T] is computed a chunk of queries at a time (kMaxScoreFloats),
// through two matmuls and a row softmax: exact attention, bounded memory, and oneDNN's GEMMs
// for a head width (512 at FLUX's sizes) the flash kernels of ops::attention do not tile.
void attention(Tensor& x, const Attention& a, int64_t groups) {
  const int64_t c = x.size(1), t = x.size(2) * x.size(3);
  const Tensor tokens = group_norm(x, a.group_norm, groups, false).view({c, t}).transpose(0, 1).contiguous();  // [T, C]
  const Tensor qkv = ops::linear(tokens, a.to_qkv);  // [T, 3 C]
  const Tensor q = qkv.slice(1, 0, c), k = qkv.slice(1, c, 2 * c), v = qkv.slice(1, 2 * c, 3 * c);  // [T, C] views
  const float scale = 1.0f / std::sqrt(float(c));
  const int64_t chunk = std::max<int64_t>(1, kMaxScoreFloats / t);
  Tensor attended = Tensor::empty({t, c}, DType::f32);  // [T, C]
  for (int64_t r0 = 0; r0 < t; r0 += chunk) {
    const int64_t r1 = std::min(t, r0 + chunk);
    const Tensor probs = ops::softmax(ops::matmul(q.slice(0, r0, r1), k, {.transpose_b = true, .alpha = scale}));  // [rows, T]
    attended.slice(0, r0, r1).copy_from(ops::matmul(probs, v));  // [rows, C]
  }
  const Tensor out = ops::linear(attended, a.to_out);  // [T, C]
  ops::add_(x, out.transpose(0, 1).contiguous().view(x.shape()));  // residual; rescale_output_factor 1
}

// ---- tiling -----------------------------------------------------------------------------------

struct TileGeometry {
  int64_t latent;  // tile side in latent cells (diffusers' tile_latent_min_size)
  int64_t step;    // latent cells between tile starts (its overlap_size)
  int64_t blend;   // pixels blended with the neighbour above / to the left (its blend_extent)
  int64_t keep;    // pixels of each tile kept after blending (its row_limit)
};

TileGeometry tile_geometry(const configs::AutoencoderKLConfig& c, const VaeTiling& tiling) {
  TileGeometry g;
  g.latent = tiling.tile_latent_size > 0 ? tiling.tile_latent_size : c.tile_latent_size();
  const int64_t sample = g.latent * c.spatial_factor();
  // diffusers' int() truncation of float products.
  g.step = int64_t(double(g.latent) * (1.0 - tiling.overlap_factor));
  g.blend = int64_t(double(sample) * tiling.overlap_factor);
  g.keep = sample - g.blend;
  return g;
}

// diffusers' blend_v: b's first e rows (e = min(rows of a, rows of b, blend)) become
// a[-e + y] * (1 - y / e) + b[y] * (y / e). a, b: [1, C, H, W] contiguous, the same C and W.
void blend_rows(const Tensor& a, Tensor& b, int64_t blend) {
  const int64_t channels = b.size(1), ha = a.size(2), hb = b.size(2), width = b.size(3);
  const int64_t e = std::min({ha, hb, blend});
  const float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < e; ++y) {
      const float wa = float(1.0 - double(y) / double(e)), wb = float(double(y) / double(e));
      const float* ra = pa + (c * ha + ha - e + y) * width;
      float* rb = pb + (c * hb + y) * width;
      for (int64_t x = 0; x < width; ++x) rb[x] = ra[x] * wa + rb[x] * wb;
    }
}

// diffusers' blend_h: the same along columns. a, b: [1, C, H, W] contiguous, the same C and H.
void blend_columns(const Tensor& a, Tensor& b, int64_t blend) {
  const int64_t channels = b.size(1), height = b.size(2), wa_cols = a.size(3), wb_cols = b.size(3);
  const int64_t e = std::min({wa_cols, wb_cols, blend});
  const float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < height; ++y) {
      const float* ra = pa + (c * height + y) * wa_cols + wa_cols - e;
      float* rb = pb + (c * height + y) * wb_cols;
      for (int64_t x = 0; x < e; ++x) {
        const float wa = float(1.0 - double(x) / double(e)), wb = float(double(x) / double(e));
        rb[x] = ra[x] * wa + rb[x] * wb;
      }
    }
}

}  // namespace

AutoencoderKLDecoder::AutoencoderKLDecoder(configs::AutoencoderKLConfig config, std::unique_ptr<Weights> weights)
    : c_(std::move(config)), w_(std::move(weights)) {}

AutoencoderKLDecoder::~AutoencoderKLDecoder() = default;

Result<std::unique_ptr<AutoencoderKLDecoder>> AutoencoderKLDecoder::load(const WeightSource& weights,
                                                                         const configs::AutoencoderKLConfig& config,
                                                                         const AutoencoderKLLoadOptions& options) {
  PRISM_RETURN_IF_ERROR(config.validate());
  ArenaScope no_arena(nullptr);  // weights outlive every decode
  PRISM_ASSIGN_OR_RETURN(Weights loaded, load_weights(weights, config, options));
  return std::unique_ptr<AutoencoderKLDecoder>(
      new AutoencoderKLDecoder(config, std::make_unique<Weights>(std::move(loaded))));
}

Result<std::unique_ptr<AutoencoderKLDecoder>> AutoencoderKLDecoder::load(const std::string& dir,
                                                                         const AutoencoderKLLoadOptions& options) {
  PRISM_ASSIGN_OR_RETURN(const configs::AutoencoderKLConfig config, configs::AutoencoderKLConfig::load(dir));
  Result<WeightSource> src = WeightSource::open(dir);
  if (!src) return common::in_dir(dir, src.status());
  Result<std::unique_ptr<AutoencoderKLDecoder>> model = load(*src, config, options);
  if (!model) return common::in_dir(dir, model.status());
  return model;
}

const configs::AutoencoderKLConfig& AutoencoderKLDecoder::config() const { return c_; }
int64_t AutoencoderKLDecoder::spatial_factor() const { return c_.spatial_factor(); }

Tensor AutoencoderKLDecoder::unscale_latents(const Tensor& latents) const {
  PRISM_CHECK_MSG(latents.dim() == 4 && latents.size(1) == c_.latent_channels && latents.dtype() == DType::f32,
                  "unscale_latents: latents must be [N, latent_channels, h, w] f32");
  const Tensor inv_scale = Tensor::from<float>({float(1.0 / c_.scaling_factor)}, {1});
  const Tensor shift = Tensor::from<float>({float(c_.shift_factor)}, {1});
  return ops::add(ops::mul(latents, inv_scale), shift);  // [N, L, h, w]
}

Tensor AutoencoderKLDecoder::decode_image(const Tensor& z) const {
  const int64_t g = c_.norm_num_groups;
  Tensor x = w_->post_quant_conv.defined() ? conv(z, w_->post_quant_conv) : z;  // [1, L, h, w]
  x = conv(x, w_->conv_in);                                                      // [1, C_top, h, w]
  x = resnet(x, w_->mid_resnet0, g);
  if (w_->mid_attention) attention(x, *w_->mid_attention, g);
  x = resnet(x, w_->mid_resnet1, g);
  for (const UpBlock& block : w_->up_blocks) {
    for (const Resnet& r : block.resnets) x = resnet(x, r, g);  // [1, C_i, s, s]
    if (block.upsampler.defined()) x = conv(ops::upsample_nearest(x, 2), block.upsampler);  // [1, C_i, 2 s, 2 s]
  }
  x = group_norm(x, w_->conv_norm_out, g, true);  // [1, C_0, f h, f w]
  return conv(x, w_->conv_out);                   // [1, out_channels, f h, f w]
}

Tensor AutoencoderKLDecoder::decode(const Tensor& z, const std::optional<VaeTiling>& tiling) const {
  PRISM_CHECK_MSG(z.dim() == 4 && z.size(1) == c_.latent_channels && z.dtype() == DType::f32,
                  "decode: z must be [N, latent_channels, h, w] f32");
  if (tiling) {
    const int64_t tile = tile_geometry(c_, *tiling).latent;
    if (z.size(2) > tile || z.size(3) > tile) return tiled_decode(z, *tiling);
  }
  const int64_t n = z.size(0), f = spatial_factor();
  Tensor out = Tensor::empty({n, c_.out_channels, z.size(2) * f, z.size(3) * f}, DType::f32);  // caller's arena
  ArenaScope heap(nullptr);  // intermediates freed as soon as dropped: the peak is the live set
  for (int64_t i = 0; i < n; ++i) out.slice(0, i, i + 1).copy_from(decode_image(z.slice(0, i, i + 1).contiguous()));
  return out;
}

Status AutoencoderKLDecoder::check_tiling(const VaeTiling& tiling) const {
  if (!(tiling.overlap_factor >= 0.0 && tiling.overlap_factor < 1.0) || tiling.tile_latent_size < 0)
    return invalid_argument("VAE tiling: overlap_factor must be in [0, 1) and tile_latent_size not negative");
  const TileGeometry g = tile_geometry(c_, tiling);
  if (g.step < 1 || g.step * spatial_factor() != g.keep)
    return invalid_argument("VAE tiling: tiles of " + std::to_string(g.latent) + " latent cells with overlap " +
                            std::to_string(tiling.overlap_factor) + " start every " + std::to_string(g.step) +
                            " cells but keep " + std::to_string(g.keep) + " pixels; the two must match");
  return Status();
}

// NOTE: the tiles of one image in raster order, each blended in place with the already blended
// tile above (kept from the previous row) and the one to its left, then its first keep x keep
// pixels copied out: diffusers' order, so its in-place blending of blended neighbours is
// reproduced. The tile starting at latent (i, j) lands at pixel (i f, j f): keep = step f, so the
// kept parts partition the image. Memory: one tile's activations plus two rows of decoded tiles.
void AutoencoderKLDecoder::tiled_decode_image(const Tensor& z, const VaeTiling& tiling, Tensor& out) const {
  const TileGeometry g = tile_geometry(c_, tiling);
  const int64_t h = z.size(2), w = z.size(3), f = spatial_factor();
  std::vector<Tensor> above;  // the previous row's blended tiles [1, out, th, tw]
  for (int64_t i = 0; i < h; i += g.step) {
    std::vector<Tensor> row;
    for (int64_t j = 0; j < w; j += g.step) {
      const Tensor latent = z.slice(2, i, std::min(h, i + g.latent)).slice(3, j, std::min(w, j + g.latent)).contiguous();
      Tensor tile = decode_image(latent);  // [1, out, th, tw]
      if (i > 0) blend_rows(above[row.size()], tile, g.blend);
      if (!row.empty()) blend_columns(row.back(), tile, g.blend);
      const int64_t rows = std::min(g.keep, tile.size(2)), cols = std::min(g.keep, tile.size(3));
      out.slice(2, i * f, i * f + rows).slice(3, j * f, j * f + cols).copy_from(tile.slice(2, 0, rows).slice(3, 0, cols));
      row.push_back(std::move(tile));
    }
    above = std::move(row);
  }
}

Tensor AutoencoderKLDecoder::tiled_decode(const Tensor& z, const VaeTiling& tiling) const {
  PRISM_CHECK_MSG(z.dim() == 4 && z.size(1) == c_.latent_channels && z.dtype() == DType::f32,
                  "tiled_decode: z must be [N, latent_channels, h, w] f32");
  const Status ok = check_tiling(tiling);
  PRISM_CHECK_MSG(ok.ok(), ok.message().c_str());
  const int64_t n = z.size(0), f = spatial_factor();
  Tensor out = Tensor::empty({n, c_.out_channels, z.size(2) * f, z.size(3) * f}, DType::f32);  // caller's arena
  ArenaScope heap(nullptr);
  for (int64_t i = 0; i < n; ++i) {
    Tensor image = out.slice(0, i, i + 1);
    tiled_decode_image(z.slice(0, i, i + 1), tiling, image);
  }
  return out;
}

int64_t AutoencoderKLDecoder::weight_bytes() const {
  int64_t bytes = 0;
  auto conv_bytes = [&](const Conv& c) {
    if (c.packed.defined()) bytes += c.packed.packed_bytes;
    else if (c.defined()) bytes += int64_t(c.weight.nbytes() + c.bias.nbytes());
  };
  auto norm_bytes = [&](const GroupNormWeights& n) { bytes += int64_t(n.weight.nbytes() + n.bias.nbytes()); };
  auto resnet_bytes = [&](const Resnet& r) {
    norm_bytes(r.norm1);
    norm_bytes(r.norm2);
    conv_bytes(r.conv1);
    conv_bytes(r.conv2);
    conv_bytes(r.conv_shortcut);
  };
  conv_bytes(w_->post_quant_conv);
  conv_bytes(w_->conv_in);
  resnet_bytes(w_->mid_resnet0);
  resnet_bytes(w_->mid_resnet1);
  if (w_->mid_attention) {
    norm_bytes(w_->mid_attention->group_norm);
    bytes += common::linear_bytes(w_->mid_attention->to_qkv) + common::linear_bytes(w_->mid_attention->to_out);
  }
  for (const UpBlock& b : w_->up_blocks) {
    for (const Resnet& r : b.resnets) resnet_bytes(r);
    conv_bytes(b.upsampler);
  }
  norm_bytes(w_->conv_norm_out);
  conv_bytes(w_->conv_out);
  return bytes;
}

Tensor images_to_uint8(const Tensor& images) {
  PRISM_CHECK_MSG(images.dim() == 4 && images.dtype() == DType::f32, "images_to_uint8: images must be [N, C, H, W] f32");
  const Tensor x = images.contiguous();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor out = Tensor::empty({n, h, w, c}, DType::u8);  // [N, H, W, C]
  const float* src = x.data<float>();
  uint8_t* dst = out.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < h * w; ++p) {
        // Two f32 roundings, as torch's (x * 0.5 + 0.5) then numpy's (x * 255).round() make.
        const float v = std::clamp(src[(i * c + ch) * h * w + p] * 0.5f + 0.5f, 0.0f, 1.0f);
        dst[(i * h * w + p) * c + ch] = uint8_t(std::nearbyint(v * 255.0f));
      }
  return out;
}

}  // namespace prism::models

// models/taesd/taesd.cpp: TAESD's encoder and decoder as straight lines of runtime ops, in
// the order of upstream's nn.Sequential (whose indices are the checkpoint's names). Loading
// reads every tensor by name and shape; the variant and latent width come from the tensors.
// Must not: compute anything but the two networks (no clamping, no latent scaling).
#include "models/taesd/taesd.h"

#include <algorithm>
#include <span>

#include "models/common/weight_loading.h"
#include "runtime/ops.h"

namespace prism::models {
namespace {

constexpr int64_t kWidth = 64;              // every hidden layer's channels
constexpr int64_t kPoolWidth = 4 * kWidth;  // the flux_2 pooled path's channels
constexpr int64_t kPoolGroups = 4;          // GroupNorm(4, 256)
constexpr float kGroupNormEps = 1e-5f;      // torch.nn.GroupNorm's default
constexpr float kLatentClamp = 3.0f;        // the decoder's soft clamp: tanh(z / 3) * 3

// nn.Sequential indices of the blocks and the resampling convs.
constexpr int kEncoderBlocks[] = {1, 3, 4, 5, 7, 8, 9, 11, 12, 13};
constexpr int kEncoderDown[] = {2, 6, 10};
constexpr int kEncoderPooled[] = {11, 12, 13};
constexpr int kDecoderBlocks[] = {3, 4, 5, 8, 9, 10, 13, 14, 15, 18};
constexpr int kDecoderUp[] = {7, 12, 17};
constexpr int kDecoderBlocksAfterUp[] = {3, 3, 1};  // blocks after each upsample
constexpr int kDecoderPooled[] = {3, 4, 5};

bool contains(std::span<const int> v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

Result<Tensor> load_weight(const formats::WeightSource& src, const std::string& name, const Dims& shape) {
  return common::load_f32(src, name, shape);
}

Result<TaesdBlock> load_block(const formats::WeightSource& src, int index, bool pooled) {
  const std::string p = std::to_string(index) + ".";
  TaesdBlock b;
  const Dims conv{kWidth, kWidth, 3, 3}, bias{kWidth};
  PRISM_ASSIGN_OR_RETURN(b.conv0_weight, load_weight(src, p + "conv.0.weight", conv));
  PRISM_ASSIGN_OR_RETURN(b.conv0_bias, load_weight(src, p + "conv.0.bias", bias));
  PRISM_ASSIGN_OR_RETURN(b.conv2_weight, load_weight(src, p + "conv.2.weight", conv));
  PRISM_ASSIGN_OR_RETURN(b.conv2_bias, load_weight(src, p + "conv.2.bias", bias));
  PRISM_ASSIGN_OR_RETURN(b.conv4_weight, load_weight(src, p + "conv.4.weight", conv));
  PRISM_ASSIGN_OR_RETURN(b.conv4_bias, load_weight(src, p + "conv.4.bias", bias));
  if (src.contains(p + "skip.weight"))
    return invalid_argument("tensor '" + p + "skip.weight': TAESD blocks are 64 -> 64 with an identity skip");
  if (!pooled) return b;
  PRISM_ASSIGN_OR_RETURN(b.pool0_weight, load_weight(src, p + "pool.0.weight", {kPoolWidth, kWidth, 1, 1}));
  PRISM_ASSIGN_OR_RETURN(b.pool1_weight, load_weight(src, p + "pool.1.weight", {kPoolWidth}));
  PRISM_ASSIGN_OR_RETURN(b.pool1_bias, load_weight(src, p + "pool.1.bias", {kPoolWidth}));
  PRISM_ASSIGN_OR_RETURN(b.pool3_weight, load_weight(src, p + "pool.3.weight", {kWidth, kPoolWidth, 1, 1}));
  return b;
}

Tensor conv3x3(const Tensor& x, const Tensor& w, const Tensor& b, int stride = 1) {
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = stride;
  p.padding_h = p.padding_w = 1;
  return ops::conv2d(x, w, b, p);
}

Tensor conv1x1(const Tensor& x, const Tensor& w) { return ops::conv2d(x, w, Tensor()); }

// x: [N, 64, H, W] -> [N, 64, H, W]:
// relu(conv4(relu(conv2(relu(conv0(x))))) + x), after x += pool(x) in flux_2 blocks.
Tensor block(const TaesdBlock& b, Tensor x) {
  if (b.pool0_weight.defined()) {
    Tensor h = conv1x1(x, b.pool0_weight);  // [N, 256, H, W]
    h = ops::relu(ops::group_norm(h, b.pool1_weight, b.pool1_bias, kPoolGroups, kGroupNormEps));
    x = ops::add(x, conv1x1(h, b.pool3_weight));  // [N, 64, H, W]
  }
  Tensor h = ops::relu(conv3x3(x, b.conv0_weight, b.conv0_bias));
  h = ops::relu(conv3x3(h, b.conv2_weight, b.conv2_bias));
  h = conv3x3(h, b.conv4_weight, b.conv4_bias);
  ops::add_(h, x);
  return ops::relu(h);
}

Tensor scalar(float v) { return Tensor::from<float>({v}, {1}); }

}  // namespace

std::string_view taesd_variant_name(TaesdVariant v) { return v == TaesdVariant::flux_2 ? "flux_2" : "taesd"; }

Status TaesdConfig::validate() const {
  if (latent_channels < 1 || latent_channels > 1024)
    return invalid_argument("TAESD latent_channels " + std::to_string(latent_channels) + " is out of range");
  return Status();
}

Result<TaesdConfig> infer_taesd_config(const formats::WeightSource& src, TaesdPart part, const TaesdOptions& options) {
  const bool encoder = part == TaesdPart::encoder;
  const std::string what = encoder ? "TAESD encoder" : "TAESD decoder";
  // The layer next to the pixels tells the 8x layout from upstream's 32x "f32" (Sana) one.
  const std::string pixel_layer = encoder ? "0.weight" : "19.weight";
  PRISM_ASSIGN_OR_RETURN(Tensor pixel, src.get(pixel_layer));
  const Dims want_pixel = encoder ? Dims{kWidth, 3, 3, 3} : Dims{3, kWidth, 3, 3};
  if (!(pixel.shape() == want_pixel))
    return unimplemented(what + ": tensor '" + pixel_layer + "' is " + pixel.shape().to_string() + ", not " +
                         want_pixel.to_string() +
                         ": not the 8x TAESD layout (upstream's 32x 'f32' variant is not supported)");

  TaesdConfig c;
  const std::string latent_layer = encoder ? "14.weight" : "1.weight";
  PRISM_ASSIGN_OR_RETURN(Tensor latent, src.get(latent_layer));
  if (latent.dim() != 4) return invalid_argument(what + ": tensor '" + latent_layer + "' must be 4-D");
  c.latent_channels = encoder ? latent.size(0) : latent.size(1);

  const int first_pooled = encoder ? kEncoderPooled[0] : kDecoderPooled[0];
  const bool has_pool = src.contains(std::to_string(first_pooled) + ".pool.0.weight");
  c.variant = has_pool ? TaesdVariant::flux_2 : TaesdVariant::taesd;
  if (options.variant && *options.variant != c.variant)
    return invalid_argument(
        what + ": asked for variant " + std::string(taesd_variant_name(*options.variant)) + " but the checkpoint is " +
        std::string(taesd_variant_name(c.variant)) +
        (has_pool ? " (it has the pooled GroupNorm blocks)" : " (it has no pooled GroupNorm blocks)"));
  PRISM_RETURN_IF_ERROR(c.validate());
  return c;
}

// ---- encoder ---------------------------------------------------------------------------------

Result<TaesdEncoder> TaesdEncoder::load(const formats::WeightSource& src, const TaesdOptions& options) {
  TaesdEncoder e;
  PRISM_ASSIGN_OR_RETURN(e.config_, infer_taesd_config(src, TaesdPart::encoder, options));
  const bool flux_2 = e.config_.variant == TaesdVariant::flux_2;
  PRISM_ASSIGN_OR_RETURN(e.conv_in_weight_, load_weight(src, "0.weight", {kWidth, 3, 3, 3}));
  PRISM_ASSIGN_OR_RETURN(e.conv_in_bias_, load_weight(src, "0.bias", {kWidth}));
  for (int i : kEncoderDown) {
    PRISM_ASSIGN_OR_RETURN(Tensor w, load_weight(src, std::to_string(i) + ".weight", {kWidth, kWidth, 3, 3}));
    e.down_weight_.push_back(w);
  }
  for (int i : kEncoderBlocks) {
    PRISM_ASSIGN_OR_RETURN(TaesdBlock b, load_block(src, i, flux_2 && contains(kEncoderPooled, i)));
    e.blocks_.push_back(std::move(b));
  }
  const int64_t c = e.config_.latent_channels;
  PRISM_ASSIGN_OR_RETURN(e.conv_out_weight_, load_weight(src, "14.weight", {c, kWidth, 3, 3}));
  PRISM_ASSIGN_OR_RETURN(e.conv_out_bias_, load_weight(src, "14.bias", {c}));
  return e;
}

Tensor TaesdEncoder::forward(const Tensor& image) const {
  PRISM_CHECK_MSG(image.dim() == 4 && image.size(1) == 3, "TAESD encoder: image must be [N, 3, H, W]");
  Tensor x = conv3x3(image, conv_in_weight_, conv_in_bias_);  // [N, 64, H, W]
  x = block(blocks_[0], x);
  size_t next = 1;
  for (const Tensor& down : down_weight_) {  // each: [N, 64, h, w] -> [N, 64, ceil(h / 2), ceil(w / 2)]
    x = conv3x3(x, down, Tensor(), /*stride=*/2);
    for (int k = 0; k < 3; ++k) x = block(blocks_[next++], x);
  }
  return conv3x3(x, conv_out_weight_, conv_out_bias_);  // [N, C, H / 8, W / 8]
}

// ---- decoder ---------------------------------------------------------------------------------

Result<TaesdDecoder> TaesdDecoder::load(const formats::WeightSource& src, const TaesdOptions& options) {
  TaesdDecoder d;
  PRISM_ASSIGN_OR_RETURN(d.config_, infer_taesd_config(src, TaesdPart::decoder, options));
  const bool flux_2 = d.config_.variant == TaesdVariant::flux_2;
  const int64_t c = d.config_.latent_channels;
  PRISM_ASSIGN_OR_RETURN(d.conv_in_weight_, load_weight(src, "1.weight", {kWidth, c, 3, 3}));
  PRISM_ASSIGN_OR_RETURN(d.conv_in_bias_, load_weight(src, "1.bias", {kWidth}));
  for (int i : kDecoderUp) {
    PRISM_ASSIGN_OR_RETURN(Tensor w, load_weight(src, std::to_string(i) + ".weight", {kWidth, kWidth, 3, 3}));
    d.up_weight_.push_back(w);
  }
  for (int i : kDecoderBlocks) {
    PRISM_ASSIGN_OR_RETURN(TaesdBlock b, load_block(src, i, flux_2 && contains(kDecoderPooled, i)));
    d.blocks_.push_back(std::move(b));
  }
  PRISM_ASSIGN_OR_RETURN(d.conv_out_weight_, load_weight(src, "19.weight", {3, kWidth, 3, 3}));
  PRISM_ASSIGN_OR_RETURN(d.conv_out_bias_, load_weight(src, "19.bias", {3}));
  return d;
}

Tensor TaesdDecoder::forward(const Tensor& latent) const {
  PRISM_CHECK_MSG(latent.dim() == 4 && latent.size(1) == config_.latent_channels,
                  "TAESD decoder: latent must be [N, latent_channels, h, w]");
  // Soft clamp to (-3, 3): tanh(z / 3) * 3 (z * (1/3) here: at most an ulp from z / 3).
  Tensor x = ops::mul(ops::tanh(ops::mul(latent, scalar(1.0f / kLatentClamp))), scalar(kLatentClamp));
  x = ops::relu(conv3x3(x, conv_in_weight_, conv_in_bias_));  // [N, 64, h, w]
  size_t next = 0;
  for (int k = 0; k < 3; ++k) x = block(blocks_[next++], x);
  for (size_t stage = 0; stage < up_weight_.size(); ++stage) {  // each: [N, 64, h, w] -> [N, 64, 2h, 2w]
    x = conv3x3(ops::upsample_nearest(x, 2), up_weight_[stage], Tensor());
    for (int k = 0; k < kDecoderBlocksAfterUp[stage]; ++k) x = block(blocks_[next++], x);
  }
  return conv3x3(x, conv_out_weight_, conv_out_bias_);  // [N, 3, 8h, 8w]
}

// ---- both ------------------------------------------------------------------------------------

Result<TinyAutoencoder> TinyAutoencoder::load(const std::string& encoder_path, const std::string& decoder_path,
                                              const TaesdOptions& options) {
  PRISM_ASSIGN_OR_RETURN(formats::WeightSource enc_src, formats::WeightSource::open(encoder_path));
  PRISM_ASSIGN_OR_RETURN(formats::WeightSource dec_src, formats::WeightSource::open(decoder_path));
  Result<TaesdEncoder> enc = TaesdEncoder::load(enc_src, options);
  if (!enc) return common::in_dir(encoder_path, enc.status());
  Result<TaesdDecoder> dec = TaesdDecoder::load(dec_src, options);
  if (!dec) return common::in_dir(decoder_path, dec.status());
  const TaesdConfig &e = enc->config(), &d = dec->config();
  if (e.variant != d.variant || e.latent_channels != d.latent_channels)
    return invalid_argument("TAESD encoder '" + encoder_path + "' (" + std::string(taesd_variant_name(e.variant)) +
                            ", " + std::to_string(e.latent_channels) + " latent channels) and decoder '" +
                            decoder_path + "' (" + std::string(taesd_variant_name(d.variant)) + ", " +
                            std::to_string(d.latent_channels) + ") do not belong together");
  return TinyAutoencoder(std::move(*enc), std::move(*dec));
}

}  // namespace prism::models

#include "engines/denoise/image_pipeline.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "configs/hf_config.h"
#include "engines/denoise/flow_schedule.h"
#include "engines/denoise/noise.h"
#include "models/llama/llama_text_encoder.h"
#include "models/z_image/z_image.h"

namespace prism::engines::denoise {
namespace {

namespace fs = std::filesystem;

// The preview projection's fit: latents of kFitCells x kFitCells cells, kFitSamples of them.
constexpr int64_t kFitCells = 8;
constexpr int64_t kFitSamples = 4;
constexpr uint64_t kFitSeed = 0x5052'4953'4d00ull;  // any fixed seed: the fit is deterministic

uint8_t to_u8(double v) {  // [-1, 1] -> [0, 255], as VaeImageProcessor.postprocess
  return uint8_t(std::lround(std::clamp(v * 0.5 + 0.5, 0.0, 1.0) * 255.0));
}

// Solves the (n x n) system a x = b in place by Gaussian elimination with partial pivoting.
void solve(std::vector<double>& a, std::vector<double>& b, int n, int cols) {
  for (int k = 0; k < n; ++k) {
    int pivot = k;
    for (int i = k + 1; i < n; ++i)
      if (std::abs(a[i * n + k]) > std::abs(a[pivot * n + k])) pivot = i;
    for (int j = 0; j < n; ++j) std::swap(a[k * n + j], a[pivot * n + j]);
    for (int j = 0; j < cols; ++j) std::swap(b[k * cols + j], b[pivot * cols + j]);
    for (int i = 0; i < n; ++i) {
      if (i == k) continue;
      const double f = a[i * n + k] / a[k * n + k];
      for (int j = 0; j < n; ++j) a[i * n + j] -= f * a[k * n + j];
      for (int j = 0; j < cols; ++j) b[i * cols + j] -= f * b[k * cols + j];
    }
  }
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < cols; ++j) b[k * cols + j] /= a[k * n + k];
}

}  // namespace

Result<std::unique_ptr<ImagePipeline>> ImagePipeline::load(const std::string& dir, const ImagePipelineOptions& options) {
  auto p = std::unique_ptr<ImagePipeline>(new ImagePipeline());
  const fs::path root(dir);
  PRISM_ASSIGN_OR_RETURN(const configs::HfConfig index, configs::HfConfig::load((root / "model_index.json").string()));
  PRISM_ASSIGN_OR_RETURN(p->pipeline_, index.get_string("_class_name"));
  if (p->pipeline_ != "ZImagePipeline")
    return invalid_argument(index.origin() + ": pipeline \"" + p->pipeline_ + "\" is not one Prism runs (known: ZImagePipeline)");
  PRISM_ASSIGN_OR_RETURN(p->scheduler_, configs::SchedulerConfig::load(dir));
  // Z-Image conditions on hidden_states[-2]: the second-to-last layer's output, before the norm.
  PRISM_ASSIGN_OR_RETURN(p->text_encoder_, models::load_llama_text_encoder((root / "text_encoder").string(),
                                                                           options.text_encoder_precision,
                                                                           {.hidden_states_index = -2}));
  PRISM_ASSIGN_OR_RETURN(p->denoiser_, models::load_z_image(dir, options.precision));
  PRISM_ASSIGN_OR_RETURN(p->vae_, models::AutoencoderKLDecoder::load((root / "vae").string(),
                                                                      {.conv_precision = options.vae_precision}));
  if (p->vae_->config().latent_channels != p->denoiser_->latent_channels())
    return invalid_argument(dir + ": the VAE decodes " + std::to_string(p->vae_->config().latent_channels) +
                            " latent channels but the transformer makes " +
                            std::to_string(p->denoiser_->latent_channels()));
  if (!options.tiny_autoencoder.empty()) {
    PRISM_ASSIGN_OR_RETURN(const formats::WeightSource tiny, formats::WeightSource::open(options.tiny_autoencoder));
    PRISM_ASSIGN_OR_RETURN(models::TaesdDecoder decoder, models::TaesdDecoder::load(tiny));
    if (decoder.config().latent_channels != p->latent_channels())
      return invalid_argument(options.tiny_autoencoder + ": the tiny autoencoder decodes " +
                              std::to_string(decoder.config().latent_channels) + " latent channels, this model makes " +
                              std::to_string(p->latent_channels()));
    if (p->vae_factor() != 8)
      return invalid_argument(options.tiny_autoencoder + ": the tiny autoencoder upsamples 8x, this model's VAE " +
                              std::to_string(p->vae_factor()) + "x");
    p->tiny_ = std::move(decoder);
  }
  PRISM_RETURN_IF_ERROR(p->fit_preview_projection());
  return p;
}

Tensor ImagePipeline::encode_prompt(std::span<const int32_t> tokens) const {
  PRISM_CHECK_MSG(!tokens.empty(), "encode_prompt: no tokens");
  models::EncoderBatch batch;
  batch.token_ids = Tensor::from(tokens, {int64_t(tokens.size())});
  batch.cu_seqlens = Tensor::from<int32_t>({0, int32_t(tokens.size())}, {2});
  return text_encoder_->encode(batch);  // [L, cond_dim]
}

Result<DenoiseRequest> ImagePipeline::make_request(int64_t id, const frontends::ImageParams& params, int image_index,
                                                   Tensor cond, Tensor uncond) const {
  const int64_t f = vae_factor();
  const int64_t h = params.height / f, w = params.width / f;
  DenoiseRequest r;
  r.id = id;
  r.latent_shape = {latent_channels(), h, w};
  r.seed = params.seed + uint64_t(image_index);
  r.cond = std::move(cond);
  const bool guided = frontends::uses_cfg(params);
  if (guided) r.uncond = std::move(uncond);

  configs::SchedulerConfig config = scheduler_;
  if (params.shift > 0.0f) {  // a fixed shift replaces the size-dependent one
    config.use_dynamic_shifting = false;
    config.shift = params.shift;
  }
  ScheduleRequest schedule{.num_steps = params.steps};
  if (config.use_dynamic_shifting) schedule.mu = calculate_shift(z_image_seq_len(h, w), config);
  if (config.scheduler_class == configs::SchedulerClass::flow_match_euler)
    schedule.sigmas = z_image_default_sigmas(params.steps);  // what pipeline_z_image.py passes
  PRISM_ASSIGN_OR_RETURN(r.schedule, make_flow_schedule(config, schedule));

  r.sampler = sampler_options(config);
  if (params.sampler == frontends::Sampler::unipc) r.sampler.kind = SamplerKind::unipc;
  if (params.sampler == frontends::Sampler::euler) r.sampler.kind = SamplerKind::flow_euler;

  GuidanceParams& g = r.guidance;
  g.guidance_scale = guided ? 1.0 + params.guidance_scale : 1.0;  // Z-Image: pos + g (pos - neg)
  g.interval_start = params.cfg_start;
  g.interval_stop = params.cfg_stop;
  if (params.cfg_truncation < 1.0f) g.cfg_truncation = params.cfg_truncation;
  g.cfg_normalization = params.cfg_normalization ? 1.0 : 0.0;  // the pipeline's float(True)
  g.cfg_zero_star = params.cfg_zero_star;
  g.zero_init_steps = params.zero_init_steps;
  g.guidance_rescale = params.guidance_rescale;
  PRISM_RETURN_IF_ERROR(g.validate());
  return r;
}

media::Image ImagePipeline::decode(const Tensor& latent, bool tiny) const {
  Tensor images;  // [1, 3, H, W] f32 in about [-1, 1]
  if (tiny) {
    PRISM_CHECK_MSG(tiny_.has_value(), "decode: no tiny autoencoder");
    // The denoiser's latents as they are: TAESD-layout decoders take them with a scale of 1
    // (diffusers' AutoencoderTiny), and give RGB in [0, 1].
    images = tiny_->forward(latent.contiguous().unsqueeze(0));
    float* px = images.data<float>();
    for (int64_t i = 0; i < images.numel(); ++i) px[i] = px[i] * 2.0f - 1.0f;
  } else {
    images = vae_->decode(vae_->unscale_latents(latent.contiguous().unsqueeze(0)), models::VaeTiling{});
  }
  const Tensor pixels = models::images_to_uint8(images);  // [1, H, W, 3] u8
  media::Image image;
  image.height = int(pixels.size(1));
  image.width = int(pixels.size(2));
  image.pixels.assign(pixels.data<uint8_t>(), pixels.data<uint8_t>() + pixels.numel());
  return image;
}

media::Image ImagePipeline::preview(const Tensor& x0, bool tiny) const {
  if (tiny) return decode(x0, /*tiny=*/true);
  const Tensor x = x0.contiguous();
  const int64_t c = x.size(0), h = x.size(1), w = x.size(2), f = vae_factor();
  const float* px = x.data<float>();
  const float* m = latent_rgb_.data<float>();
  media::Image image;
  image.width = int(w * f);
  image.height = int(h * f);
  image.pixels.resize(size_t(image.num_pixels()) * 3);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t col = 0; col < w; ++col) {
      std::array<double, 3> rgb = {m[c * 3], m[c * 3 + 1], m[c * 3 + 2]};
      for (int64_t k = 0; k < c; ++k)
        for (int j = 0; j < 3; ++j) rgb[j] += double(px[(k * h + y) * w + col]) * m[k * 3 + j];
      const std::array<uint8_t, 3> u8 = {to_u8(rgb[0]), to_u8(rgb[1]), to_u8(rgb[2])};
      for (int64_t dy = 0; dy < f; ++dy)
        for (int64_t dx = 0; dx < f; ++dx)
          std::copy(u8.begin(), u8.end(), image.pixels.begin() + ((y * f + dy) * image.width + col * f + dx) * 3);
    }
  return image;
}

// NOTE: the projection is fitted to the VAE itself, not read from a table: decode a few
// Gaussian latents (the denoiser's latents are scaled to about unit variance), average each
// decoded cell's pixels, and solve the least-squares fit of those colours on the cell's latent
// channels plus a bias. Any VAE (a trained one, the demo's random one) gets its own preview,
// at the cost of kFitSamples decodes of 8 x 8 cells at load.
Status ImagePipeline::fit_preview_projection() {
  const int64_t c = latent_channels(), f = vae_factor(), cells = kFitCells * kFitCells;
  const Tensor latents = gaussian_noise({kFitSamples, c, kFitCells, kFitCells}, kFitSeed);
  const Tensor images = vae_->decode(vae_->unscale_latents(latents)).contiguous();  // [S, 3, 8f, 8f]
  const int n = int(c) + 1;
  std::vector<double> xtx(size_t(n) * n, 0.0), xty(size_t(n) * 3, 0.0);
  const float* pl = latents.data<float>();
  const float* pi = images.data<float>();
  const int64_t side = kFitCells * f;
  for (int64_t s = 0; s < kFitSamples; ++s)
    for (int64_t cell = 0; cell < cells; ++cell) {
      const int64_t cy = cell / kFitCells, cx = cell % kFitCells;
      std::vector<double> row(size_t(n), 1.0);  // the latent's channels, then 1 (the bias)
      for (int64_t k = 0; k < c; ++k) row[size_t(k)] = pl[((s * c + k) * kFitCells + cy) * kFitCells + cx];
      std::array<double, 3> mean = {0, 0, 0};
      for (int j = 0; j < 3; ++j)
        for (int64_t dy = 0; dy < f; ++dy)
          for (int64_t dx = 0; dx < f; ++dx) mean[j] += pi[((s * 3 + j) * side + cy * f + dy) * side + cx * f + dx];
      for (double& v : mean) v /= double(f * f);
      for (int a = 0; a < n; ++a) {
        for (int b = 0; b < n; ++b) xtx[size_t(a) * n + b] += row[size_t(a)] * row[size_t(b)];
        for (int j = 0; j < 3; ++j) xty[size_t(a) * 3 + j] += row[size_t(a)] * mean[j];
      }
    }
  for (int a = 0; a < n; ++a) xtx[size_t(a) * n + a] += 1e-6;  // ridge: a channel the VAE ignores stays 0
  solve(xtx, xty, n, 3);
  latent_rgb_ = Tensor::empty({c + 1, 3}, DType::f32);
  for (size_t i = 0; i < xty.size(); ++i) latent_rgb_.data<float>()[i] = float(xty[i]);
  return Status();
}

}  // namespace prism::engines::denoise

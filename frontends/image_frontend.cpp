#include "frontends/image_frontend.h"

#include <algorithm>
#include <filesystem>

#include "configs/hf_config.h"
#include "configs/vae_config.h"
#include "configs/z_image_config.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;

// Pipelines whose components Prism runs, by model_index.json's _class_name.
constexpr std::string_view kPipelines[] = {"ZImagePipeline"};

Result<int64_t> knob_in(const serving::Knobs& knobs, std::string_view name, int64_t fallback, int64_t lo, int64_t hi) {
  PRISM_ASSIGN_OR_RETURN(const int64_t v, knobs.get_int(name, fallback));
  if (v < lo || v > hi)
    return invalid_argument(knobs.where(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], got " + std::to_string(v));
  return v;
}

}  // namespace

const std::vector<std::string_view>& image_knob_names() {
  static const std::vector<std::string_view> names = {"default_steps", "default_guidance_scale", "max_image_side",
                                                      "max_images", "max_sequence_length", "tiny_autoencoder",
                                                      "text_encoder_precision", "vae_precision"};
  return names;
}

Result<std::shared_ptr<const ImageFrontend>> ImageFrontend::load(const serving::DeploymentConfig& config) {
  const fs::path dir(config.model);
  auto fe = std::make_shared<ImageFrontend>();

  PRISM_ASSIGN_OR_RETURN(const configs::HfConfig index, configs::HfConfig::load((dir / "model_index.json").string()));
  PRISM_ASSIGN_OR_RETURN(fe->pipeline_, index.get_string("_class_name"));
  if (std::find(std::begin(kPipelines), std::end(kPipelines), fe->pipeline_) == std::end(kPipelines))
    return invalid_argument(index.origin() + ": pipeline \"" + fe->pipeline_ +
                            "\" is not one Prism runs (known: ZImagePipeline)");

  // The pixels one latent token covers: the VAE's down-sampling times the transformer's patch.
  PRISM_ASSIGN_OR_RETURN(const configs::AutoencoderKLConfig vae, configs::AutoencoderKLConfig::load((dir / "vae").string()));
  PRISM_ASSIGN_OR_RETURN(const configs::ZImageConfig transformer, configs::ZImageConfig::load((dir / "transformer").string()));
  fe->size_multiple_ = int(vae.spatial_factor() * configs::ZImageConfig::kPatchSize);
  // The rotary tables bound a caption's tokens and the latent's tokens along each side.
  const int64_t side_limit =
      std::min(transformer.max_tokens_high(), transformer.max_tokens_wide()) * fe->size_multiple_;
  const serving::Knobs& knobs = config.knobs;
  PRISM_RETURN_IF_ERROR(knobs.check_names(image_knob_names(), "an image deployment"));
  PRISM_ASSIGN_OR_RETURN(const int64_t max_side, knob_in(knobs, "max_image_side", std::min<int64_t>(2048, side_limit),
                                                                    fe->size_multiple_, side_limit));
  PRISM_ASSIGN_OR_RETURN(const int64_t max_images, knob_in(knobs, "max_images", 4, 1, 10));
  PRISM_ASSIGN_OR_RETURN(fe->max_sequence_length_, knob_in(knobs, "max_sequence_length",
                                                                 std::min<int64_t>(512, transformer.max_caption_tokens()), 1,
                                                                 transformer.max_caption_tokens()));
  PRISM_ASSIGN_OR_RETURN(const int64_t steps, knob_in(knobs, "default_steps", 50, 1, 1000));
  PRISM_ASSIGN_OR_RETURN(const double guidance, knobs.get_double("default_guidance_scale", 5.0));
  if (guidance < 0 || guidance > 100)
    return invalid_argument(knobs.where("default_guidance_scale") + " must be in [0, 100]");
  PRISM_ASSIGN_OR_RETURN(fe->tiny_autoencoder_, knobs.get_string("tiny_autoencoder", ""));
  if (!fe->tiny_autoencoder_.empty() && !fs::exists(fe->tiny_autoencoder_))
    return not_found(knobs.where("tiny_autoencoder") + ": no file " + fe->tiny_autoencoder_);
  if (!fe->tiny_autoencoder_.empty()) fe->defaults_.preview = PreviewDecoder::tiny;
  fe->max_side_ = int(max_side);
  fe->max_images_ = int(max_images);
  fe->defaults_.steps = int(steps);
  fe->defaults_.guidance_scale = float(guidance);
  const int side = std::min(1024, fe->max_side_ / fe->size_multiple_ * fe->size_multiple_);
  fe->defaults_.width = fe->defaults_.height = side;

  const fs::path tokenizer_dir = dir / "tokenizer";
  PRISM_ASSIGN_OR_RETURN(fe->tokenizer_, text::Tokenizer::load(tokenizer_dir.string()));
  fe->tokenizer_.set_truncation(std::nullopt);  // lengths are ours (max_sequence_length)
  fe->tokenizer_.set_padding(std::nullopt);
  auto chat = text::ChatTemplate::load(tokenizer_dir.string());
  if (chat.has_value()) {
    fe->chat_template_ = std::move(chat).value();
  } else if (chat.status().code() != StatusCode::not_found) {
    return chat.status();
  }
  return std::shared_ptr<const ImageFrontend>(std::move(fe));
}

Result<std::vector<int32_t>> ImageFrontend::prompt_tokens(std::string_view prompt) const {
  std::string text(prompt);
  // NOTE: a text encoder without a chat template reads the prompt as is (the pipeline's
  // apply_chat_template would fail there; a plain prompt is what such an encoder was trained on).
  if (chat_template_) {
    text::ChatRequest chat;
    chat.messages.push_back({{"role", "user"}, {"content", std::string(prompt)}});
    chat.add_generation_prompt = true;
    chat.extra["enable_thinking"] = true;
    PRISM_ASSIGN_OR_RETURN(text, chat_template_->render(chat));
  }
  text::Encoding encoding = tokenizer_.encode(text);
  std::vector<int32_t> ids(encoding.ids.begin(), encoding.ids.end());
  if (int64_t(ids.size()) > max_sequence_length_) ids.resize(size_t(max_sequence_length_));
  return ids;
}

Status ImageFrontend::check_size(int width, int height) const {
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (width < size_multiple_ || height < size_multiple_ || width % size_multiple_ != 0 || height % size_multiple_ != 0)
    return invalid_argument("is " + size + ": width and height must be positive multiples of " +
                            std::to_string(size_multiple_) + " for this model");
  if (width > max_side_ || height > max_side_)
    return invalid_argument("is " + size + ": width and height must be at most " + std::to_string(max_side_) +
                            " for this deployment");
  return Status();
}

}  // namespace prism::frontends

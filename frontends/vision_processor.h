// frontends/vision_processor.h: what a VLM deployment does to images and videos before
// its engine, as the model's Hugging Face processor does (LlavaProcessor, Idefics3Processor):
// preprocess each item into pixel views under the visual-token budget, count the rows the
// encoder will give for it, key it by content, and expand the image placeholder that the
// chat template wrote into the model's token layout (LLaVA: "<image>" × rows; Idefics3: per
// tile "<fake_token_around_image><row_r_col_c>" + "<image>" × rows, then the global view's
// "<global-img>" block). Shared read-only by the api's I/O threads; holds no tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "configs/hf_config.h"
#include "configs/vlm_config.h"
#include "frontends/generate_payload.h"
#include "media/image.h"
#include "media/image_preprocess.h"
#include "media/media_source.h"
#include "media/video.h"
#include "serving/config.h"
#include "text/tokenizer.h"

namespace prism::frontends {

// The visual-token budget: deployment knobs, each overridable per request in the `prism`
// field. Each has a quality figure in docs/vlm.md (greedy agreement, logit KL vs the full
// representation).
struct VisualBudget {
  media::ImageBudget image;  // knobs max_image_side, max_image_tiles
  int spatial_pool = 1;      // knob spatial_pool: 1, 2 or 4 (must divide the grid side)
  media::VideoSampling video;  // knobs video_fps, video_num_frames, video_max_frames, video_max_side
  int video_spatial_pool = 2;  // knob video_spatial_pool
  int temporal_pool = 1;       // knob temporal_pool: 1..4
};

// One item ready for the engine, and the text its placeholder becomes.
struct PreparedMedia {
  MediaItem item;
  std::string prompt_text;  // replaces one placeholder() in the rendered prompt
  int64_t frames = 0;       // video: frames sampled
};

class VisionProcessor {
 public:
  // model_dir: config.json, read through configs::VlmConfig (the family, image_token_id /
  // image_token_index, scale_factor, vision_config), preprocessor_config.json,
  // processor_config.json (image_seq_len) when present. Knobs read: the budget's above plus
  // max_image_pixels, allowed_local_media_dir, allowed_media_hosts (comma-separated),
  // max_media_bytes, max_video_seconds. invalid_argument naming a bad knob or config value;
  // the tokenizer must know the placeholder tokens.
  static Result<std::unique_ptr<const VisionProcessor>> load(const std::string& model_dir, const serving::Knobs& knobs,
                                                             const text::Tokenizer& tokenizer);
  // The same with config.json already read (GenerateFrontend parses it once).
  static Result<std::unique_ptr<const VisionProcessor>> load(const std::string& model_dir,
                                                             const configs::VlmConfig& config,
                                                             const serving::Knobs& knobs,
                                                             const text::Tokenizer& tokenizer);
  // configs::VlmConfig::from_hf, its errors as invalid_argument (a deployment that cannot serve).
  static Result<configs::VlmConfig> read_config(const configs::HfConfig& config);
  static Result<configs::VlmConfig> read_config(const std::string& model_dir);

  // The deployment's budget with a request's `prism` object applied (same names as the knobs;
  // unknown names and bad values: invalid_argument naming "prism.<name>").
  Result<VisualBudget> budget(const nlohmann::json& prism_field) const;
  const VisualBudget& default_budget() const { return defaults_; }

  // Reads, decodes and prepares a media URL part (image_url / video_url). Errors are the
  // media layer's predicates (the caller prefixes the part's name).
  Result<PreparedMedia> prepare_image_url(std::string_view url, const VisualBudget& budget) const;
  Result<PreparedMedia> prepare_video_url(std::string_view url, const VisualBudget& budget) const;
  Result<PreparedMedia> prepare_image(const media::Image& image, const VisualBudget& budget) const;
  Result<PreparedMedia> prepare_video(const media::VideoFrames& video, const VisualBudget& budget) const;

  // What the chat template writes for an image content part ({"type": "image"}).
  const std::string& placeholder() const { return placeholder_; }
  int32_t image_token_id() const { return image_token_id_; }
  // Replaces the k-th placeholder of `rendered` with items[k].prompt_text; invalid_argument
  // when the counts differ (a template that drops image parts).
  Result<std::string> expand(std::string_view rendered, std::span<const PreparedMedia> items) const;

  const media::ImageProcessorConfig& image_config() const { return image_config_; }
  const media::MediaSourcePolicy& source_policy() const { return source_policy_; }

  // The encoder's rows per view a side (LLaVA-1.5: 24; SmolVLM: 8), and per view after a
  // p × p spatial pool.
  int64_t grid_side() const { return grid_side_; }
  int64_t rows_per_view(int spatial_pool) const;

  // The knobs load() reads (the budget's and the media policy's), for the deployment's
  // Knobs::check_names.
  static std::span<const std::string_view> knob_names();

 private:
  VisionProcessor() = default;
  // The item, its key, rows and prompt text once its views are made.
  Result<PreparedMedia> finish(std::shared_ptr<media::PixelViews> views, MediaItem::Kind kind, int spatial_pool,
                               int temporal_pool, int64_t frames) const;
  struct Layout;  // the family's placeholder layout (llava / idefics3)
  std::shared_ptr<const Layout> layout_;
  media::ImageProcessorConfig image_config_;
  media::MediaSourcePolicy source_policy_;
  media::ImageLimits image_limits_;
  media::VideoLimits video_limits_;
  VisualBudget defaults_;
  std::string placeholder_ = "<image>";
  int32_t image_token_id_ = -1;
  int64_t grid_side_ = 0;  // encoder rows per view = grid_side²
};

}  // namespace prism::frontends

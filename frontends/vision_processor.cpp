// frontends/vision_processor.cpp: a VLM's Hugging Face processor (LlavaProcessor,
// Idefics3Processor) without the tensors: the budget knobs, media preparation into pixel
// views, content keys, row counts and the placeholder layouts. It must not run an encoder or
// know the engine's batches: the views leave here as plain arrays in a MediaItem.
#include "frontends/vision_processor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "base/file.h"
#include "base/log.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

enum class Family : uint8_t { llava, idefics3 };

// Idefics3's markers (processing_idefics3.py); row/column markers count from 1.
constexpr std::string_view kImageToken = "<image>";
constexpr std::string_view kFakeToken = "<fake_token_around_image>";
constexpr std::string_view kGlobalToken = "<global-img>";
constexpr int kMinTileMarkers = 6;  // SmolVLM's tokenizers carry <row_1_col_1> ... <row_6_col_6>

std::string tile_marker(int row, int col) {
  return "<row_" + std::to_string(row) + "_col_" + std::to_string(col) + ">";
}

std::string repeat(std::string_view s, int64_t n) {
  std::string out;
  out.reserve(s.size() * size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

Result<json> read_json_object(const fs::path& path) {
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(path.string()));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

// A positive integer field of `j`, or `fallback` when absent (the HF config class's default).
Result<int64_t> positive_int(const json& j, const char* key, int64_t fallback, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 1)
    return invalid_argument(origin + ": \"" + key + "\" must be a positive integer");
  return it->get<int64_t>();
}

// ---- the budget knobs: one table for the deployment's knobs and a request's `prism` object ----

struct BudgetKnob {
  std::string_view name;
  bool integer;  // else any number
  double lo, hi;
  std::string_view rule;  // completes "... must be "
  void (*set)(VisualBudget&, double);
};

constexpr BudgetKnob kBudgetKnobs[] = {
    {"max_image_side", true, 0, 16384, "an integer in [0, 16384] (0: the processor's size)",
     [](VisualBudget& b, double v) { b.image.max_side = int(v); }},
    {"max_image_tiles", true, -1, 36, "an integer in [-1, 36] (-1: no cap, 0: no splitting)",
     [](VisualBudget& b, double v) { b.image.max_tiles = int(v); }},
    {"spatial_pool", true, 1, 64, "an integer in [1, 64] dividing the encoder's grid side",
     [](VisualBudget& b, double v) { b.spatial_pool = int(v); }},
    {"video_fps", false, 0.01, 60, "a number in [0.01, 60]", [](VisualBudget& b, double v) { b.video.fps = v; }},
    {"video_num_frames", true, 0, 256, "an integer in [0, 256] (0: sample by video_fps)",
     [](VisualBudget& b, double v) { b.video.num_frames = int(v); }},
    {"video_max_frames", true, 1, 256, "an integer in [1, 256]",
     [](VisualBudget& b, double v) { b.video.max_frames = int(v); }},
    {"video_max_side", true, 0, 16384, "an integer in [0, 16384] (0: frames as decoded)",
     [](VisualBudget& b, double v) { b.video.max_side = int(v); }},
    {"video_spatial_pool", true, 1, 64, "an integer in [1, 64] dividing the encoder's grid side",
     [](VisualBudget& b, double v) { b.video_spatial_pool = int(v); }},
    {"temporal_pool", true, 1, 4, "an integer in [1, 4]", [](VisualBudget& b, double v) { b.temporal_pool = int(v); }},
};

// The media policy knobs: deployment only (a request must not widen what the server reads).
constexpr std::string_view kPolicyKnobs[] = {"max_image_pixels", "allowed_local_media_dir", "allowed_media_hosts",
                                             "max_media_bytes", "max_video_seconds"};

constexpr std::array<std::string_view, std::size(kBudgetKnobs) + std::size(kPolicyKnobs)> all_knob_names() {
  std::array<std::string_view, std::size(kBudgetKnobs) + std::size(kPolicyKnobs)> names{};
  size_t i = 0;
  for (const BudgetKnob& k : kBudgetKnobs) names[i++] = k.name;
  for (std::string_view k : kPolicyKnobs) names[i++] = k;
  return names;
}
constexpr auto kKnobNames = all_knob_names();

std::string budget_names() {
  std::string list;
  for (const BudgetKnob& k : kBudgetKnobs) list += (list.empty() ? "" : ", ") + std::string(k.name);
  return list;
}

std::string format_number(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(int64_t(v));
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  return s;
}

std::string divisors_of(int64_t n) {
  std::string list;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) list += (list.empty() ? "" : ", ") + std::to_string(d);
  return list;
}

// A pool size must divide the encoder's grid side; `who` names the knob or field.
Status check_pool(const std::string& who, int pool, int64_t grid_side) {
  if (pool >= 1 && grid_side % pool == 0) return {};
  return invalid_argument(who + " must divide the encoder's grid side of " + std::to_string(grid_side) + " (one of " +
                          divisors_of(grid_side) + "), got " + std::to_string(pool));
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

std::vector<std::string> split_hosts(const std::string& list) {
  std::vector<std::string> hosts;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string host = list.substr(start, end - start);
    const auto first = host.find_first_not_of(" \t");
    const auto last = host.find_last_not_of(" \t");
    if (first != std::string::npos) hosts.push_back(host.substr(first, last - first + 1));
    start = end + 1;
  }
  return hosts;
}

// NOTE: the key is a hash of the views themselves, the encoder's exact input: everything that
// acts before the encoder (pixels, the processor's resize / crop / normalise, the tiles and
// sides the budget allows) is in it, and nothing that acts after (pooling: the engine keys
// pooled rows itself). Two requests whose views are equal share the encoder output.
media::MediaKey views_key(const media::PixelViews& views) {
  media::MediaKeyBuilder b;
  b.add(std::string_view("prism.pixel_views.v1"));
  b.add(int64_t(views.side)).add(int64_t(views.num_views));
  b.add(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(views.values.data()),
                                 views.values.size() * sizeof(float)));
  return b.finish();
}

// The encoder's rows a side per view: (image_size / patch_size) patches, and for Idefics3 its
// connector folding scale_factor² patches into one row. The config's defaults fill absent
// keys (configs::VlmConfig: llava-1.5's CLIP ViT-L/14 at 336 without a vision_config).
Result<int64_t> encoder_grid_side(const configs::VlmConfig& config, const configs::VisionTowerConfig& tower) {
  const std::string vision_origin = config.origin + ": vision_config";
  if (tower.image_size % tower.patch_size != 0)
    return invalid_argument(vision_origin + ": image_size " + std::to_string(tower.image_size) +
                            " is not a multiple of patch_size " + std::to_string(tower.patch_size));
  const int64_t grid_side = tower.image_size / tower.patch_size;
  if (config.family == configs::VlmFamily::llava) {
    if (config.vision_feature_select_strategy != "default")  // "full" keeps CLS: rows are not a square grid
      return invalid_argument(config.origin + ": vision_feature_select_strategy '" +
                              config.vision_feature_select_strategy +
                              "' is not supported (only \"default\", which drops the CLS token)");
    return grid_side;
  }
  if (grid_side % config.scale_factor != 0)
    return invalid_argument(config.origin + ": scale_factor " + std::to_string(config.scale_factor) +
                            " does not divide the vision grid side of " + std::to_string(grid_side));
  return grid_side / config.scale_factor;
}

// processor_config.json's image_seq_len, when present, must be the rows the encoder gives.
Status check_image_seq_len(const fs::path& dir, int64_t grid_side, bool idefics3) {
  const fs::path processor_path = dir / "processor_config.json";
  std::error_code ec;
  if (!fs::is_regular_file(processor_path, ec)) return {};
  PRISM_ASSIGN_OR_RETURN(json processor, read_json_object(processor_path));
  PRISM_ASSIGN_OR_RETURN(const int64_t seq_len,
                         positive_int(processor, "image_seq_len", grid_side * grid_side, processor_path.string()));
  if (seq_len == grid_side * grid_side) return {};
  return invalid_argument(processor_path.string() + ": image_seq_len " + std::to_string(seq_len) +
                          " differs from the " + std::to_string(grid_side * grid_side) +
                          " rows per view the encoder gives (config.json's vision_config" +
                          (idefics3 ? " and scale_factor)" : ")"));
}

// The image processor must be the family's, its tiles the tower's input.
Status check_image_processor(const std::string& model_dir, const media::ImageProcessorConfig& ic, bool idefics3,
                             int64_t image_size) {
  if (idefics3 && ic.kind != media::ProcessorKind::idefics3)
    return invalid_argument(model_dir + "/preprocessor_config.json: an idefics3 model needs Idefics3ImageProcessor");
  if (!idefics3 && ic.kind == media::ProcessorKind::idefics3)
    return invalid_argument(model_dir + "/preprocessor_config.json: a llava model cannot use Idefics3ImageProcessor");
  if (idefics3 && ic.tile_size != image_size)
    return invalid_argument(model_dir + "/preprocessor_config.json: max_image_size.longest_edge " +
                            std::to_string(ic.tile_size) + " differs from the vision tower's image_size " +
                            std::to_string(image_size));
  return {};
}

// The placeholder tokens must each be one token of the tokenizer, the image token's id the
// one the model's config names (when it names one). Returns the image token's id.
Result<int32_t> check_placeholder_tokens(const std::string& model_dir, const configs::VlmConfig& config,
                                         const media::ImageProcessorConfig& ic, const text::Tokenizer& tokenizer) {
  const bool idefics3 = config.family == configs::VlmFamily::idefics3;
  const char* model_type = idefics3 ? "idefics3" : "llava";
  auto single_token = [&](std::string_view token) -> Result<int32_t> {
    const std::optional<text::TokenId> id = tokenizer.token_to_id(token);
    const text::Encoding enc = tokenizer.encode(token, /*add_special_tokens=*/false);
    if (!id || enc.ids.size() != 1 || enc.ids[0] != *id)
      return invalid_argument(model_dir + ": the tokenizer has no single token \"" + std::string(token) + "\", which " +
                              model_type + " prompts need");
    return int32_t(*id);
  };
  PRISM_ASSIGN_OR_RETURN(const int32_t image_token_id, single_token(kImageToken));
  if (!config.image_token_key.empty() && config.image_token_id != image_token_id)
    return invalid_argument(config.origin + ": \"" + config.image_token_key + "\" is " +
                            std::to_string(config.image_token_id) + " but the tokenizer's \"" +
                            std::string(kImageToken) + "\" is token " + std::to_string(image_token_id));
  if (idefics3) {
    PRISM_RETURN_IF_ERROR(single_token(kFakeToken).status());
    PRISM_RETURN_IF_ERROR(single_token(kGlobalToken).status());
    // Tiles come from a longest edge of at most size.longest_edge: so many rows and columns.
    const int64_t tiles_a_side = ic.tile_size > 0 ? (ic.longest_edge + ic.tile_size - 1) / ic.tile_size : 0;
    const int markers = int(std::max<int64_t>(kMinTileMarkers, tiles_a_side));
    for (int r = 1; r <= markers; ++r)
      for (int c = 1; c <= markers; ++c) PRISM_RETURN_IF_ERROR(single_token(tile_marker(r, c)).status());
  }
  return image_token_id;
}

// The budget knobs, then the pool sizes against the grid.
Result<VisualBudget> read_budget_knobs(const serving::Knobs& knobs, int64_t grid_side, const std::string& model_dir) {
  VisualBudget b;
  for (const BudgetKnob& k : kBudgetKnobs) {
    if (!knobs.has(k.name)) continue;
    double v = 0;
    if (k.integer) {
      PRISM_ASSIGN_OR_RETURN(const int64_t i, knobs.get_int(k.name, 0));
      v = double(i);
    } else {
      PRISM_ASSIGN_OR_RETURN(v, knobs.get_double(k.name, 0));
    }
    if (!(v >= k.lo && v <= k.hi))
      return invalid_argument(knobs.where(k.name) + " must be " + std::string(k.rule) + ", got " + format_number(v));
    k.set(b, v);
  }
  PRISM_RETURN_IF_ERROR(check_pool(knobs.where("spatial_pool"), b.spatial_pool, grid_side));
  if (!knobs.has("video_spatial_pool") && grid_side % b.video_spatial_pool != 0) {
    // NOTE: the default of 2 needs an even grid; an odd one (a tiny test tower) pools nothing.
    PRISM_LOG_WARN("'{}': video_spatial_pool defaults to 1: the encoder's grid side {} is odd", model_dir, grid_side);
    b.video_spatial_pool = 1;
  }
  PRISM_RETURN_IF_ERROR(check_pool(knobs.where("video_spatial_pool"), b.video_spatial_pool, grid_side));
  return b;
}

// The media policy knobs (deployment only).
struct MediaPolicy {
  media::MediaSourcePolicy source;
  media::ImageLimits image;
  media::VideoLimits video;
};

Result<MediaPolicy> read_media_policy(const serving::Knobs& knobs) {
  MediaPolicy m;
  if (knobs.has("max_image_pixels")) {
    PRISM_ASSIGN_OR_RETURN(const int64_t v, knobs.get_int("max_image_pixels", 0));
    if (v < 1)
      return invalid_argument(knobs.where("max_image_pixels") + " must be at least 1, got " + std::to_string(v));
    m.image.max_pixels = v;
  }
  if (knobs.has("max_media_bytes")) {
    PRISM_ASSIGN_OR_RETURN(const int64_t v, knobs.get_int("max_media_bytes", 0));
    if (v < 1)
      return invalid_argument(knobs.where("max_media_bytes") + " must be at least 1, got " + std::to_string(v));
    m.source.max_bytes = v;
    m.image.max_bytes = v;
    m.video.max_bytes = v;
  }
  if (knobs.has("max_video_seconds")) {
    PRISM_ASSIGN_OR_RETURN(const double v, knobs.get_double("max_video_seconds", 0));
    if (!(v > 0))
      return invalid_argument(knobs.where("max_video_seconds") + " must be positive, got " + format_number(v));
    m.video.max_seconds = v;
  }
  PRISM_ASSIGN_OR_RETURN(m.source.allowed_local_dir, knobs.get_string("allowed_local_media_dir", ""));
  std::error_code ec;
  if (!m.source.allowed_local_dir.empty() && !fs::is_directory(m.source.allowed_local_dir, ec))
    return invalid_argument(knobs.where("allowed_local_media_dir") + " is '" + m.source.allowed_local_dir +
                            "', which is not a directory");
  PRISM_ASSIGN_OR_RETURN(const std::string hosts, knobs.get_string("allowed_media_hosts", ""));
  m.source.allowed_hosts = split_hosts(hosts);
  return m;
}

}  // namespace

struct VisionProcessor::Layout {
  Family family = Family::llava;
  std::string model_type;
};

std::span<const std::string_view> VisionProcessor::knob_names() { return kKnobNames; }

Result<std::unique_ptr<const VisionProcessor>> VisionProcessor::load(const std::string& model_dir,
                                                                     const serving::Knobs& knobs,
                                                                     const text::Tokenizer& tokenizer) {
  PRISM_ASSIGN_OR_RETURN(const configs::VlmConfig config, read_config(model_dir));
  return load(model_dir, config, knobs, tokenizer);
}

Result<configs::VlmConfig> VisionProcessor::read_config(const std::string& model_dir) {
  Result<configs::HfConfig> hf = configs::HfConfig::load(model_dir);
  if (!hf) return hf.status();
  return read_config(*hf);
}

Result<configs::VlmConfig> VisionProcessor::read_config(const configs::HfConfig& config) {
  Result<configs::VlmConfig> vlm = configs::VlmConfig::from_hf(config);
  if (!vlm) return invalid_argument(vlm.status().message());  // a bad deployment, whatever the config's code
  return vlm;
}

Result<std::unique_ptr<const VisionProcessor>> VisionProcessor::load(const std::string& model_dir,
                                                                     const configs::VlmConfig& config,
                                                                     const serving::Knobs& knobs,
                                                                     const text::Tokenizer& tokenizer) {
  auto layout = std::make_shared<Layout>();
  const bool idefics3 = config.family == configs::VlmFamily::idefics3;
  layout->family = idefics3 ? Family::idefics3 : Family::llava;
  layout->model_type = idefics3 ? "idefics3" : "llava";
  Result<configs::VisionTowerConfig> tower = config.vision_tower();
  if (!tower) return invalid_argument(tower.status().message());
  PRISM_ASSIGN_OR_RETURN(const int64_t grid_side, encoder_grid_side(config, *tower));
  PRISM_RETURN_IF_ERROR(check_image_seq_len(fs::path(model_dir), grid_side, idefics3));

  auto vp = std::unique_ptr<VisionProcessor>(new VisionProcessor());
  vp->layout_ = layout;
  vp->grid_side_ = grid_side;
  PRISM_ASSIGN_OR_RETURN(vp->image_config_, media::ImageProcessorConfig::load(model_dir));
  PRISM_RETURN_IF_ERROR(check_image_processor(model_dir, vp->image_config_, idefics3, tower->image_size));
  PRISM_ASSIGN_OR_RETURN(vp->image_token_id_, check_placeholder_tokens(model_dir, config, vp->image_config_, tokenizer));
  PRISM_ASSIGN_OR_RETURN(vp->defaults_, read_budget_knobs(knobs, grid_side, model_dir));
  PRISM_ASSIGN_OR_RETURN(MediaPolicy policy, read_media_policy(knobs));
  vp->source_policy_ = std::move(policy.source);
  vp->image_limits_ = policy.image;
  vp->video_limits_ = policy.video;

  const VisualBudget& b = vp->defaults_;
  PRISM_LOG_INFO("vision processor '{}': {} grid {}x{} ({} rows a view), image token {}, budget max_image_side {} "
                 "max_image_tiles {} spatial_pool {}, video fps {} num_frames {} max_frames {} max_side {} "
                 "spatial_pool {} temporal_pool {}; local media {}, remote hosts {}",
                 model_dir, layout->model_type, grid_side, grid_side, grid_side * grid_side, vp->image_token_id_,
                 b.image.max_side, b.image.max_tiles, b.spatial_pool, b.video.fps, b.video.num_frames,
                 b.video.max_frames, b.video.max_side, b.video_spatial_pool, b.temporal_pool,
                 vp->source_policy_.allowed_local_dir.empty() ? "off" : vp->source_policy_.allowed_local_dir,
                 vp->source_policy_.allowed_hosts.empty() ? "off" : join(vp->source_policy_.allowed_hosts));
  return std::unique_ptr<const VisionProcessor>(std::move(vp));
}

Result<VisualBudget> VisionProcessor::budget(const json& prism_field) const {
  VisualBudget b = defaults_;
  if (prism_field.is_null()) return b;
  if (!prism_field.is_object())
    return invalid_argument("prism must be an object of per-request options (" + budget_names() + "), got " +
                            prism_field.dump());
  for (const auto& [name, value] : prism_field.items()) {
    const BudgetKnob* knob = nullptr;
    for (const BudgetKnob& k : kBudgetKnobs)
      if (k.name == name) knob = &k;
    if (knob == nullptr)
      return invalid_argument("prism." + name + " is not a known option (known: " + budget_names() + ")");
    const bool typed = knob->integer ? value.is_number_integer() : value.is_number();
    const double v = typed ? value.get<double>() : 0.0;
    if (!typed || !(v >= knob->lo && v <= knob->hi))
      return invalid_argument("prism." + name + " must be " + std::string(knob->rule) + ", got " + value.dump());
    knob->set(b, v);
  }
  PRISM_RETURN_IF_ERROR(check_pool("prism.spatial_pool", b.spatial_pool, grid_side_));
  PRISM_RETURN_IF_ERROR(check_pool("prism.video_spatial_pool", b.video_spatial_pool, grid_side_));
  return b;
}

Result<PreparedMedia> VisionProcessor::prepare_image_url(std::string_view url, const VisualBudget& budget) const {
  PRISM_ASSIGN_OR_RETURN(media::MediaBytes bytes, media::read_media_url(url, source_policy_));
  PRISM_ASSIGN_OR_RETURN(media::Image image, media::decode_image(bytes.bytes, image_limits_));
  return prepare_image(image, budget);
}

Result<PreparedMedia> VisionProcessor::prepare_video_url(std::string_view url, const VisualBudget& budget) const {
  PRISM_ASSIGN_OR_RETURN(media::MediaBytes bytes, media::read_media_url(url, source_policy_));
  PRISM_ASSIGN_OR_RETURN(media::VideoFrames video, media::decode_video(bytes.bytes, budget.video, video_limits_));
  return prepare_video(video, budget);
}

int64_t VisionProcessor::rows_per_view(int pool) const {
  const int64_t side = grid_side_ / std::max(pool, 1);
  return side * side;
}

Result<PreparedMedia> VisionProcessor::prepare_image(const media::Image& image, const VisualBudget& budget) const {
  if (image.width < 1 || image.height < 1 || image.pixels.size() != size_t(image.num_pixels()) * 3)
    return invalid_argument("is an empty image");
  PRISM_RETURN_IF_ERROR(check_pool("spatial_pool", budget.spatial_pool, grid_side_));
  auto views = std::make_shared<media::PixelViews>(media::preprocess_image(image, image_config_, budget.image));
  if (views->num_views < 1) return internal_error("the image processor gave no views");
  return finish(std::move(views), MediaItem::Kind::image, budget.spatial_pool, 1, 0);
}

Result<PreparedMedia> VisionProcessor::prepare_video(const media::VideoFrames& video,
                                                     const VisualBudget& budget) const {
  if (video.frames.empty()) return invalid_argument("has no frames to sample");
  PRISM_RETURN_IF_ERROR(check_pool("video_spatial_pool", budget.video_spatial_pool, grid_side_));
  if (budget.temporal_pool < 1) return invalid_argument("temporal_pool must be at least 1");
  auto views = std::make_shared<media::PixelViews>();
  for (const media::Image& frame : video.frames) {
    media::PixelViews v = media::preprocess_frame(frame, image_config_);
    if (v.num_views != 1 || (views->num_views > 0 && v.side != views->side))
      return internal_error("the frame processor gave views of differing sides");
    views->side = v.side;
    views->num_views += 1;
    views->values.insert(views->values.end(), v.values.begin(), v.values.end());
  }
  return finish(std::move(views), MediaItem::Kind::video, budget.video_spatial_pool, budget.temporal_pool,
                int64_t(video.frames.size()));
}

Result<PreparedMedia> VisionProcessor::finish(std::shared_ptr<media::PixelViews> views, MediaItem::Kind kind,
                                              int spatial_pool, int temporal_pool, int64_t frames) const {
  PreparedMedia out;
  MediaItem& item = out.item;
  item.kind = kind;
  item.key = views_key(*views);
  item.spatial_pool = spatial_pool;
  item.temporal_pool = temporal_pool;
  const int64_t per_view = rows_per_view(spatial_pool);
  const int64_t groups = (views->num_views + temporal_pool - 1) / temporal_pool;
  item.num_rows = groups * per_view;
  out.frames = frames;

  const std::string image_rows = repeat(kImageToken, per_view);
  const std::string fake(kFakeToken);
  const std::string wrapped = fake + std::string(kGlobalToken) + image_rows + fake;
  if (layout_->family == Family::llava) {
    out.prompt_text = repeat(kImageToken, item.num_rows);
  } else if (kind == MediaItem::Kind::video) {
    out.prompt_text = repeat(wrapped, groups);  // one global-view block per frame (or temporal group)
  } else if (views->rows > 0 && views->cols > 0) {
    // NOTE: Idefics3Processor's split layout: tiles in raster order, a "\n" after each tile
    // row, then the global view's block after a blank line.
    if (views->num_views != views->rows * views->cols + 1)
      return internal_error("the image processor gave " + std::to_string(views->num_views) + " views for " +
                            std::to_string(views->rows) + "x" + std::to_string(views->cols) + " tiles");
    for (int r = 1; r <= views->rows; ++r) {
      for (int c = 1; c <= views->cols; ++c) out.prompt_text += fake + tile_marker(r, c) + image_rows;
      out.prompt_text += "\n";
    }
    out.prompt_text += "\n" + wrapped;
  } else {
    out.prompt_text = wrapped;
  }
  item.views = std::move(views);
  return out;
}

Result<std::string> VisionProcessor::expand(std::string_view rendered, std::span<const PreparedMedia> items) const {
  std::vector<size_t> at;
  for (size_t pos = rendered.find(placeholder_); pos != std::string_view::npos;
       pos = rendered.find(placeholder_, pos + placeholder_.size()))
    at.push_back(pos);
  if (at.size() != items.size())
    return invalid_argument("the prompt holds " + std::to_string(at.size()) + " \"" + placeholder_ +
                            "\" placeholders for " + std::to_string(items.size()) +
                            " images and videos (the chat template must write one per image part, and text parts "
                            "must not contain \"" +
                            placeholder_ + "\")");
  std::string out;
  size_t from = 0;
  for (size_t k = 0; k < at.size(); ++k) {
    out.append(rendered.substr(from, at[k] - from));
    out += items[k].prompt_text;
    from = at[k] + placeholder_.size();
  }
  out.append(rendered.substr(from));
  return out;
}

}  // namespace prism::frontends

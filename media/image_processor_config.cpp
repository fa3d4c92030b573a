// ImageProcessorConfig: preprocessor_config.json read as transformers reads it for the three
// processors Prism implements, with transformers' defaults for absent keys and an error
// naming the key for a value it would reject or we cannot reproduce. It computes nothing.
#include <cmath>
#include <filesystem>
#include <string>

#include "base/file.h"
#include "media/image_preprocess.h"

namespace prism::media {

namespace {

using json = nlohmann::json;

constexpr float kClipMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};   // OPENAI_CLIP_MEAN
constexpr float kClipStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};   // OPENAI_CLIP_STD
constexpr float kStandardMean[3] = {0.5f, 0.5f, 0.5f};                   // IMAGENET_STANDARD_*
constexpr float kStandardStd[3] = {0.5f, 0.5f, 0.5f};

// A key's value; null counts as absent, as transformers treats it.
const json* find(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Status bad(const std::string& key, const char* want, const json& v) {
  std::string got = v.dump();
  if (got.size() > 40) got = got.substr(0, 37) + "...";
  return invalid_argument("'" + key + "' must be " + want + ", got " + got);
}

Status read_bool(const json& object, const char* key, bool& out) {
  const json* v = find(object, key);
  if (!v) return Status();
  if (!v->is_boolean()) return bad(key, "true or false", *v);
  out = v->get<bool>();
  return Status();
}

Status read_positive_int(const json& v, const std::string& key, int& out) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (1 << 20))
    return bad(key, "a positive integer", v);
  out = int(v.get<int64_t>());
  return Status();
}

Status read_channels(const json& object, const char* key, float (&out)[3]) {
  const json* v = find(object, key);
  if (!v) return Status();
  if (v->is_number()) {
    out[0] = out[1] = out[2] = v->get<float>();
    return Status();
  }
  if (!v->is_array() || v->size() != 3) return bad(key, "a number or a list of 3 numbers", *v);
  for (int c = 0; c < 3; ++c) {
    if (!(*v)[c].is_number()) return bad(key, "a number or a list of 3 numbers", *v);
    out[c] = (*v)[c].get<float>();
  }
  return Status();
}

// A size dict ("size", "crop_size", "max_image_size") or a bare integer, as get_size_dict
// accepts; a bare integer is {shortest_edge} when !square, else {height, width}.
struct SizeDict {
  int shortest_edge = 0, longest_edge = 0, height = 0, width = 0;
};

Status read_size(const json& object, const char* key, bool square, SizeDict& out, bool& present) {
  const json* v = find(object, key);
  present = v != nullptr;
  if (!v) return Status();
  if (v->is_number_integer()) {
    int n = 0;
    PRISM_RETURN_IF_ERROR(read_positive_int(*v, key, n));
    out = SizeDict{};
    if (square) out.height = out.width = n;
    else out.shortest_edge = n;
    return Status();
  }
  if (!v->is_object()) return bad(key, "an object or an integer", *v);
  out = SizeDict{};
  for (auto& [name, value] : v->items()) {
    const std::string full = std::string(key) + "." + name;
    if (value.is_null()) continue;
    if (name == "shortest_edge") PRISM_RETURN_IF_ERROR(read_positive_int(value, full, out.shortest_edge));
    else if (name == "longest_edge") PRISM_RETURN_IF_ERROR(read_positive_int(value, full, out.longest_edge));
    else if (name == "height") PRISM_RETURN_IF_ERROR(read_positive_int(value, full, out.height));
    else if (name == "width") PRISM_RETURN_IF_ERROR(read_positive_int(value, full, out.width));
    else return invalid_argument("'" + full + "' is not a size key (shortest_edge, longest_edge, height, width)");
  }
  return Status();
}

Result<ProcessorKind> kind_of(const json& object) {
  const json* type = find(object, "image_processor_type");
  if (!type) type = find(object, "feature_extractor_type");
  if (!type) return invalid_argument("has no 'image_processor_type'");
  if (!type->is_string()) return bad("image_processor_type", "a string", *type);
  const std::string name = type->get<std::string>();
  // The Fast variants share the slow ones' configs; Prism computes as the slow (PIL) ones.
  if (name == "CLIPImageProcessor" || name == "CLIPImageProcessorFast" || name == "CLIPFeatureExtractor")
    return ProcessorKind::clip;
  if (name == "SiglipImageProcessor" || name == "SiglipImageProcessorFast") return ProcessorKind::siglip;
  if (name == "Idefics3ImageProcessor" || name == "Idefics3ImageProcessorFast") return ProcessorKind::idefics3;
  return invalid_argument("'image_processor_type' " + name +
                          " is not supported (CLIPImageProcessor, SiglipImageProcessor, Idefics3ImageProcessor)");
}

Status read_clip(const json& object, ImageProcessorConfig& c) {
  c.shortest_edge = 224;
  c.height = c.width = 224;
  c.do_center_crop = true;
  SizeDict size, crop;
  bool has_size = false, has_crop = false;
  PRISM_RETURN_IF_ERROR(read_size(object, "size", /*square=*/false, size, has_size));
  PRISM_RETURN_IF_ERROR(read_size(object, "crop_size", /*square=*/true, crop, has_crop));
  PRISM_RETURN_IF_ERROR(read_bool(object, "do_center_crop", c.do_center_crop));
  if (has_crop) {
    if (crop.height == 0 || crop.width == 0) return invalid_argument("'crop_size' must have height and width");
    c.height = crop.height, c.width = crop.width;
  }
  if (has_size) {
    if (size.shortest_edge > 0) {
      c.shortest_edge = size.shortest_edge;
    } else if (size.height > 0 && size.width > 0) {
      // Resize to exactly height x width; representable only when no crop changes it.
      if (c.do_center_crop && (size.height != c.height || size.width != c.width))
        return invalid_argument("'size' {height, width} with a different 'crop_size' is not supported");
      c.shortest_edge = 0;
      c.height = size.height, c.width = size.width;
    } else {
      return invalid_argument("'size' must have shortest_edge, or height and width");
    }
  }
  if (c.height != c.width) return invalid_argument("a non-square output (crop_size) is not supported");
  if (!c.do_center_crop && (c.shortest_edge > 0 || !c.do_resize))
    return invalid_argument("do_center_crop false gives non-square views, which vision towers do not take");
  std::copy(kClipMean, kClipMean + 3, c.image_mean);
  std::copy(kClipStd, kClipStd + 3, c.image_std);
  return Status();
}

Status read_siglip(const json& object, ImageProcessorConfig& c) {
  c.height = c.width = 224;
  SizeDict size;
  bool has_size = false;
  PRISM_RETURN_IF_ERROR(read_size(object, "size", /*square=*/true, size, has_size));
  if (has_size) {
    if (size.height == 0 || size.width == 0) return invalid_argument("'size' must have height and width");
    c.height = size.height, c.width = size.width;
  }
  if (c.height != c.width) return invalid_argument("a non-square 'size' is not supported");
  if (!c.do_resize) return invalid_argument("do_resize false is not supported for SiglipImageProcessor");
  return Status();
}

Status read_idefics3(const json& object, ImageProcessorConfig& c) {
  c.resample = Resample::lanczos;
  c.longest_edge = 4 * 364;
  c.tile_size = 364;
  c.do_image_splitting = true;
  c.do_pad = true;
  SizeDict size, max_size;
  bool has_size = false, has_max = false;
  PRISM_RETURN_IF_ERROR(read_size(object, "size", /*square=*/false, size, has_size));
  PRISM_RETURN_IF_ERROR(read_size(object, "max_image_size", /*square=*/false, max_size, has_max));
  if (has_size) {
    if (size.longest_edge == 0) return invalid_argument("'size' must have longest_edge");
    c.longest_edge = size.longest_edge;
  }
  if (has_max) {
    if (max_size.longest_edge == 0) return invalid_argument("'max_image_size' must have longest_edge");
    c.tile_size = max_size.longest_edge;
  }
  PRISM_RETURN_IF_ERROR(read_bool(object, "do_image_splitting", c.do_image_splitting));
  PRISM_RETURN_IF_ERROR(read_bool(object, "do_pad", c.do_pad));
  return Status();
}

}  // namespace

Result<ImageProcessorConfig> ImageProcessorConfig::from_json(const json& object) {
  if (!object.is_object()) return invalid_argument("must be a JSON object");
  ImageProcessorConfig c;
  PRISM_ASSIGN_OR_RETURN(c.kind, kind_of(object));
  std::copy(kStandardMean, kStandardMean + 3, c.image_mean);
  std::copy(kStandardStd, kStandardStd + 3, c.image_std);
  PRISM_RETURN_IF_ERROR(read_bool(object, "do_resize", c.do_resize));
  switch (c.kind) {
    case ProcessorKind::clip: PRISM_RETURN_IF_ERROR(read_clip(object, c)); break;
    case ProcessorKind::siglip: PRISM_RETURN_IF_ERROR(read_siglip(object, c)); break;
    case ProcessorKind::idefics3: PRISM_RETURN_IF_ERROR(read_idefics3(object, c)); break;
  }
  if (const json* v = find(object, "resample")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > 5)
      return bad("resample", "a PIL filter number 0..5", *v);
    c.resample = Resample(v->get<int>());
  }
  PRISM_RETURN_IF_ERROR(read_bool(object, "do_rescale", c.do_rescale));
  if (const json* v = find(object, "rescale_factor")) {
    if (!v->is_number() || !std::isfinite(v->get<double>())) return bad("rescale_factor", "a number", *v);
    c.rescale_factor = v->get<double>();
  }
  PRISM_RETURN_IF_ERROR(read_bool(object, "do_normalize", c.do_normalize));
  PRISM_RETURN_IF_ERROR(read_channels(object, "image_mean", c.image_mean));
  PRISM_RETURN_IF_ERROR(read_channels(object, "image_std", c.image_std));
  for (float s : c.image_std)
    if (c.do_normalize && s == 0.0f) return invalid_argument("'image_std' must not be 0");
  if (const json* v = find(object, "do_convert_rgb"); v && !v->is_boolean())
    return bad("do_convert_rgb", "true or false", *v);  // decoded images are RGB already
  return c;
}

Result<ImageProcessorConfig> ImageProcessorConfig::load(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "preprocessor_config.json").string();
  PRISM_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return invalid_argument(path + ": is not valid JSON");
  Result<ImageProcessorConfig> config = from_json(object);
  if (!config) return Status(config.status().code(), path + ": " + config.status().message());
  return config;
}

}  // namespace prism::media

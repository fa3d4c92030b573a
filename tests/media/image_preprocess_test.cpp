// preprocess_image / preprocess_frame against tests/reference/image_processors.py (a numpy +
// PIL port of transformers' CLIP, SigLIP and Idefics3 processors), and
// ImageProcessorConfig's reading of real preprocessor_config.json files.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "formats/safetensors.h"
#include "media/image_preprocess.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism::media {
namespace {

using json = nlohmann::json;

Image image_from(const Tensor& t) {  // U8 [H, W, 3]
  Image image;
  image.height = int(t.size(0));
  image.width = int(t.size(1));
  const uint8_t* p = t.contiguous().data<uint8_t>();
  image.pixels.assign(p, p + t.numel());
  return image;
}

Image gradient(int width, int height) {
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &image.pixels[(size_t(y) * width + x) * 3];
      p[0] = uint8_t(x * 255 / width), p[1] = uint8_t(y * 255 / height), p[2] = uint8_t((x ^ y) & 255);
    }
  return image;
}

// The real checkpoints' preprocessor_config.json (llava-hf/llava-1.5-7b-hf,
// HuggingFaceTB/SmolVLM-256M-Instruct, google/siglip-base-patch16-224).
const char* kLlavaConfig = R"({
  "crop_size": {"height": 336, "width": 336}, "do_center_crop": true, "do_convert_rgb": true,
  "do_normalize": true, "do_rescale": true, "do_resize": true,
  "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "CLIPImageProcessor",
  "image_std": [0.26862954, 0.26130258, 0.27577711], "processor_class": "LlavaProcessor",
  "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 336}})";
const char* kSmolVlmConfig = R"({
  "do_convert_rgb": true, "do_image_splitting": true, "do_normalize": true, "do_pad": true,
  "do_rescale": true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5],
  "image_processor_type": "Idefics3ImageProcessor", "image_std": [0.5, 0.5, 0.5],
  "max_image_size": {"longest_edge": 512}, "processor_class": "Idefics3Processor", "resample": 1,
  "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 2048}})";
const char* kSiglipConfig = R"({
  "do_normalize": true, "do_rescale": true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5],
  "image_processor_type": "SiglipImageProcessor", "image_std": [0.5, 0.5, 0.5],
  "processor_class": "SiglipProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
  "size": {"height": 224, "width": 224}})";

ImageProcessorConfig config_of(const char* text) {
  auto c = ImageProcessorConfig::from_json(json::parse(text));
  EXPECT_TRUE(c.has_value()) << c.status().to_string();
  return c.has_value() ? *c : ImageProcessorConfig{};
}

TEST(ImagePreprocess, MatchesTheTransformersProcessors) {
  auto dir = test::generate_reference("image_processors.py", "image_preprocess_cases", "--cases preprocess");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto file = formats::SafetensorsFile::open(*dir + "/cases.safetensors");
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  const json cases = json::parse((*file)->metadata().at("preprocess_cases"));
  ASSERT_EQ(cases.size(), 14u);
  double worst = 0;
  for (const json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    auto config = ImageProcessorConfig::from_json(c["config"]);
    ASSERT_TRUE(config.has_value()) << config.status().to_string();
    const Image input = image_from(*(*file)->get("preprocess." + name + ".input"));
    const Tensor expected = *(*file)->get("preprocess." + name + ".pixel_values");
    ImageBudget budget;
    budget.max_side = c["max_side"];
    budget.max_tiles = c["max_tiles"];
    const PixelViews got = c["frame"] ? preprocess_frame(input, *config) : preprocess_image(input, *config, budget);
    ASSERT_EQ(got.num_views, int(c["num_views"]));
    ASSERT_EQ(got.rows, int(c["rows"]));
    ASSERT_EQ(got.cols, int(c["cols"]));
    ASSERT_EQ(expected.shape(), (Dims{got.num_views, 3, got.side, got.side}));
    const float* ref = expected.data<float>();
    double max_abs = 0;
    for (size_t i = 0; i < got.values.size(); ++i) max_abs = std::max(max_abs, double(std::fabs(got.values[i] - ref[i])));
    EXPECT_LE(max_abs, 1e-5);
    worst = std::max(worst, max_abs);
  }
  std::printf("max |prism - reference| over every case: %g\n", worst);
}

TEST(ImagePreprocess, ReadsTheRealConfigs) {
  const ImageProcessorConfig llava = config_of(kLlavaConfig);
  EXPECT_EQ(llava.kind, ProcessorKind::clip);
  EXPECT_EQ(llava.shortest_edge, 336);
  EXPECT_EQ(llava.height, 336);
  EXPECT_EQ(llava.width, 336);
  EXPECT_TRUE(llava.do_center_crop);
  EXPECT_EQ(llava.resample, Resample::bicubic);
  EXPECT_FLOAT_EQ(llava.image_std[2], 0.27577711f);

  const ImageProcessorConfig smol = config_of(kSmolVlmConfig);
  EXPECT_EQ(smol.kind, ProcessorKind::idefics3);
  EXPECT_EQ(smol.longest_edge, 2048);
  EXPECT_EQ(smol.tile_size, 512);
  EXPECT_TRUE(smol.do_image_splitting);
  EXPECT_EQ(smol.resample, Resample::lanczos);

  const ImageProcessorConfig siglip = config_of(kSiglipConfig);
  EXPECT_EQ(siglip.kind, ProcessorKind::siglip);
  EXPECT_EQ(siglip.height, 224);
  EXPECT_FLOAT_EQ(siglip.image_mean[0], 0.5f);
}

TEST(ImagePreprocess, TransformersDefaultsAndLegacyIntegerSizes) {
  // openai/clip-vit-base-patch32 era: integer sizes, feature_extractor_type, no mean/std.
  const ImageProcessorConfig clip =
      config_of(R"({"feature_extractor_type": "CLIPFeatureExtractor", "size": 224, "crop_size": 224})");
  EXPECT_EQ(clip.kind, ProcessorKind::clip);
  EXPECT_EQ(clip.shortest_edge, 224);
  EXPECT_EQ(clip.height, 224);
  EXPECT_FLOAT_EQ(clip.image_mean[0], 0.48145466f);  // OPENAI_CLIP_MEAN
  const ImageProcessorConfig idefics = config_of(R"({"image_processor_type": "Idefics3ImageProcessor"})");
  EXPECT_EQ(idefics.longest_edge, 4 * 364);
  EXPECT_EQ(idefics.tile_size, 364);
  EXPECT_EQ(idefics.resample, Resample::lanczos);
  const ImageProcessorConfig siglip = config_of(R"({"image_processor_type": "SiglipImageProcessor", "size": 384})");
  EXPECT_EQ(siglip.height, 384);
  EXPECT_EQ(siglip.width, 384);
}

TEST(ImagePreprocess, BadConfigsNameTheKey) {
  auto error = [](const char* text) {
    auto c = ImageProcessorConfig::from_json(json::parse(text));
    EXPECT_FALSE(c.has_value()) << text;
    return c.has_value() ? std::string() : c.status().message();
  };
  EXPECT_NE(error(R"({"size": 3})").find("image_processor_type"), std::string::npos);
  EXPECT_NE(error(R"({"image_processor_type": "LlavaNextImageProcessor"})").find("not supported"), std::string::npos);
  EXPECT_NE(error(R"({"image_processor_type": "CLIPImageProcessor", "resample": 9})").find("'resample'"),
            std::string::npos);
  EXPECT_NE(error(R"({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": -4}})")
                .find("'size.shortest_edge'"),
            std::string::npos);
  EXPECT_NE(error(R"({"image_processor_type": "SiglipImageProcessor", "size": {"height": 224, "width": 200}})")
                .find("non-square"),
            std::string::npos);
  EXPECT_NE(error(R"({"image_processor_type": "Idefics3ImageProcessor", "size": {"shortest_edge": 3}})")
                .find("longest_edge"),
            std::string::npos);
  EXPECT_NE(error(R"({"image_processor_type": "CLIPImageProcessor", "image_mean": [0.5, 0.5]})").find("'image_mean'"),
            std::string::npos);
  EXPECT_NE(error(R"([1, 2])").find("object"), std::string::npos);
}

TEST(ImagePreprocess, LoadsFromAModelDirectory) {
  const std::string dir = test::scratch_dir("image_preprocess_load");
  ASSERT_TRUE(write_file(dir + "/preprocessor_config.json", kSmolVlmConfig).ok());
  auto config = ImageProcessorConfig::load(dir);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  EXPECT_EQ(config->tile_size, 512);

  auto missing = ImageProcessorConfig::load(dir + "/nowhere");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  ASSERT_TRUE(write_file(dir + "/preprocessor_config.json", "{ not json").ok());
  auto broken = ImageProcessorConfig::load(dir);
  ASSERT_FALSE(broken.has_value());
  EXPECT_NE(broken.status().message().find("preprocessor_config.json"), std::string::npos);
}

TEST(ImagePreprocess, MaxTilesBoundsTheGridAndShrinksMonotonically) {
  ImageProcessorConfig config = config_of(kSmolVlmConfig);
  config.longest_edge = 512;  // small tiles keep the test fast; the rule is the same
  config.tile_size = 64;
  const Image image = gradient(700, 300);
  int previous = 1 << 30;
  for (int max_tiles : {100, 24, 12, 8, 6, 4, 3, 2, 1}) {
    ImageBudget budget;
    budget.max_tiles = max_tiles;
    const PixelViews views = preprocess_image(image, config, budget);
    const int tiles = views.rows * views.cols;
    EXPECT_LE(tiles, max_tiles) << max_tiles;
    EXPECT_LE(tiles, previous) << max_tiles;
    EXPECT_EQ(views.num_views, tiles == 0 ? 1 : tiles + 1);
    EXPECT_EQ(views.values.size(), size_t(views.num_views) * 3 * 64 * 64);
    previous = tiles;
  }
  ImageBudget none;
  none.max_tiles = 0;
  const PixelViews global = preprocess_image(image, config, none);
  EXPECT_EQ(global.num_views, 1);
  EXPECT_EQ(global.rows, 0);
}

TEST(ImagePreprocess, MaxSideCapsTheResizedImage) {
  ImageProcessorConfig config = config_of(kSmolVlmConfig);
  const Image image = gradient(1000, 700);
  ImageBudget budget;
  budget.max_side = 1024;  // 1024 x 718 -> 1024 x 1024: 2 x 2 tiles
  const PixelViews views = preprocess_image(image, config, budget);
  EXPECT_EQ(views.rows, 2);
  EXPECT_EQ(views.cols, 2);
  EXPECT_EQ(views.side, 512);
  budget.max_side = 4000;  // above the processor's own 2048: no effect
  const PixelViews full = preprocess_image(image, config, budget);
  EXPECT_EQ(full.rows * full.cols, 12);
}

TEST(ImagePreprocess, ExtremeAspectRatiosGiveValidViews) {
  const ImageProcessorConfig smol = config_of(kSmolVlmConfig);
  const ImageProcessorConfig llava = config_of(kLlavaConfig);
  for (auto [w, h] : {std::pair{4000, 1}, {1, 3000}, {1, 1}, {2, 1}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    ImageBudget budget;
    budget.max_side = 1024;
    const PixelViews a = preprocess_image(gradient(w, h), smol, budget);
    EXPECT_EQ(a.values.size(), size_t(a.num_views) * 3 * 512 * 512);
    const PixelViews b = preprocess_image(gradient(w, h), llava);
    EXPECT_EQ(b.num_views, 1);
    EXPECT_EQ(b.values.size(), size_t(3) * 336 * 336);
    for (float v : b.values) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace prism::media

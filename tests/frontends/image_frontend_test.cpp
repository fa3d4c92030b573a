// ImageFrontend over a diffusers directory's small files: the size multiple from the VAE's
// blocks and the transformer's patch, size checks, the knobs' defaults and errors, the prompt
// through the chat template (thinking enabled, as Z-Image's pipeline asks) and its length cap.
#include "frontends/image_frontend.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "test_util/image_model_dir.h"
#include "test_util/paths.h"

namespace prism::frontends {
namespace {

Result<std::shared_ptr<const ImageFrontend>> load(const std::string& dir, serving::Knobs knobs = {}) {
  serving::DeploymentConfig c;
  c.name = "image";
  c.task = "image";
  c.model = dir;
  c.knobs = std::move(knobs);
  return ImageFrontend::load(c);
}

TEST(ImageFrontend, SizesAreMultiplesOfTheVaeFactorTimesThePatch) {
  auto fe = load(test::ImageModelDir{}.write("image_frontend_default"));
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->pipeline(), "ZImagePipeline");
  EXPECT_EQ((*fe)->size_multiple(), 16);  // 2^(4 - 1) x 2
  EXPECT_TRUE((*fe)->check_size(1024, 768).ok());
  EXPECT_TRUE((*fe)->check_size(16, 2048).ok());
  const Status odd = (*fe)->check_size(1000, 1024);
  EXPECT_EQ(odd.code(), StatusCode::invalid_argument);
  EXPECT_EQ(odd.message(), "is 1000x1024: width and height must be positive multiples of 16 for this model");
  EXPECT_NE((*fe)->check_size(2064, 16).message().find("at most 2048"), std::string::npos);

  auto small = load(test::ImageModelDir{.vae_blocks = 2}.write("image_frontend_small"));
  ASSERT_TRUE(small.has_value()) << small.status().to_string();
  EXPECT_EQ((*small)->size_multiple(), 4);
}

TEST(ImageFrontend, DefaultsComeFromThePipelineUnlessKnobsSetThem) {
  const std::string dir = test::ImageModelDir{}.write("image_frontend_knobs");
  auto fe = load(dir);
  ASSERT_TRUE(fe.has_value());
  EXPECT_EQ((*fe)->defaults().steps, 50);
  EXPECT_FLOAT_EQ((*fe)->defaults().guidance_scale, 5.0f);
  EXPECT_EQ((*fe)->defaults().width, 1024);
  EXPECT_EQ((*fe)->max_images(), 4);

  serving::Knobs knobs;
  knobs.set("default_steps", int64_t(8));
  knobs.set("default_guidance_scale", 0.0);
  knobs.set("max_image_side", int64_t(512));
  knobs.set("max_images", int64_t(2));
  auto turbo = load(dir, knobs);
  ASSERT_TRUE(turbo.has_value()) << turbo.status().to_string();
  EXPECT_EQ((*turbo)->defaults().steps, 8);
  EXPECT_FLOAT_EQ((*turbo)->defaults().guidance_scale, 0.0f);
  EXPECT_EQ((*turbo)->defaults().width, 512);  // 1024 clamped to the deployment's largest side
  EXPECT_EQ((*turbo)->max_images(), 2);

  serving::Knobs bad;
  bad.set("default_stepz", int64_t(8));
  auto misspelt = load(dir, bad);
  ASSERT_FALSE(misspelt.has_value());
  EXPECT_NE(misspelt.status().message().find("unknown knob 'default_stepz'"), std::string::npos);
  serving::Knobs zero;
  zero.set("default_steps", int64_t(0));
  EXPECT_FALSE(load(dir, zero).has_value());
}

TEST(ImageFrontend, TheChatTemplateWrapsThePromptWithThinkingEnabled) {
  auto fe = load(test::ImageModelDir{}.write("image_frontend_template"));
  ASSERT_TRUE(fe.has_value());
  auto plain = load(test::ImageModelDir{.chat_template = false}.write("image_frontend_plain"));
  ASSERT_TRUE(plain.has_value());
  // The templated prompt is the plain tokenization of the rendered text: compare through the
  // plain frontend, which tokenizes text as is.
  const std::string rendered = "<|im_start|>user\na red fox<|im_end|>\n<|im_start|>assistant\n";
  Result<std::vector<int32_t>> templated = (*fe)->prompt_tokens("a red fox");
  ASSERT_TRUE(templated.has_value());
  EXPECT_EQ(templated.value(), (*plain)->prompt_tokens(rendered).value());
  EXPECT_GT((*fe)->prompt_tokens("").value().size(), 0u);  // the unconditional prompt is the template's frame

  serving::Knobs cap;
  cap.set("max_sequence_length", int64_t(5));
  auto capped = load(test::ImageModelDir{}.write("image_frontend_cap"), cap);
  ASSERT_TRUE(capped.has_value());
  const std::vector<int32_t> cut = (*capped)->prompt_tokens("a red fox in the snow at dawn").value();
  ASSERT_EQ(cut.size(), 5u);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), templated.value().begin()));
}

TEST(ImageFrontend, ErrorsNameTheFileAndKey) {
  auto other = load(test::ImageModelDir{.pipeline = "StableDiffusionPipeline"}.write("image_frontend_other"));
  ASSERT_FALSE(other.has_value());
  EXPECT_NE(other.status().message().find("model_index.json: pipeline \"StableDiffusionPipeline\" is not one Prism runs"),
            std::string::npos)
      << other.status().message();
  const std::string dir = test::ImageModelDir{}.write("image_frontend_no_vae");
  std::filesystem::remove(std::filesystem::path(dir) / "vae" / "config.json");
  auto missing = load(dir);
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.status().message().find("vae"), std::string::npos) << missing.status().message();
}

}  // namespace
}  // namespace prism::frontends

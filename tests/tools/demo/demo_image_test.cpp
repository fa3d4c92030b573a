// The demo text-to-image pipeline ("demo-image"): the same bytes twice, and the directory through
// the real loaders (ImageFrontend: model_index.json, sizes, the chat template and tokenizer;
// ImagePipeline: Qwen3 text encoder, Z-Image transformer, VAE, scheduler) and one short
// generation: an image of the asked size that is not flat.
#include "tools/demo/demo_image.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "engines/denoise/denoise_loop.h"
#include "engines/denoise/image_pipeline.h"
#include "frontends/image_frontend.h"
#include "test_util/paths.h"

namespace prism::tools::demo {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::string& image_dir() {
  static const std::string dir = [] {
    std::string d = test::scratch_dir("demo_image");
    Status s = write_demo_image(d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return dir;
}

TEST(DemoImage, SameBytesOnEveryRun) {
  const std::string again = test::scratch_dir("demo_image_again");
  ASSERT_TRUE(write_demo_image(again).ok());
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(image_dir())) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), image_dir());
    EXPECT_EQ(read_file(e.path()), read_file(fs::path(again) / rel)) << rel;
    ++files;
  }
  EXPECT_EQ(files, 11);  // model_index, scheduler, 2 tokenizer files, config + weights of 3 components, README
}

TEST(DemoImage, LoadsAndGeneratesThroughTheRealPipeline) {
  serving::DeploymentConfig config;
  config.name = "demo-image";
  config.task = "image";
  config.model = image_dir();
  config.knobs.set("default_steps", int64_t{8});
  config.knobs.set("default_guidance_scale", 0.0);
  config.knobs.set("max_image_side", int64_t{512});
  auto fe = frontends::ImageFrontend::load(config);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_EQ((*fe)->size_multiple(), 16);
  EXPECT_EQ((*fe)->defaults().width, 512);
  EXPECT_EQ((*fe)->defaults().steps, 8);
  auto tokens = (*fe)->prompt_tokens("a red fox");
  ASSERT_TRUE(tokens.has_value());
  EXPECT_GT(tokens->size(), 5u);

  auto pipeline = engines::denoise::ImagePipeline::load(image_dir(), {});
  ASSERT_TRUE(pipeline.has_value()) << pipeline.status().to_string();
  frontends::ImageParams p = (*fe)->defaults();
  p.width = 64;
  p.height = 48;
  p.steps = 2;
  auto request = (*pipeline)->make_request(0, p, 0, (*pipeline)->encode_prompt(*tokens), Tensor());
  ASSERT_TRUE(request.has_value()) << request.status().to_string();
  engines::denoise::DenoiseLoop loop;
  ASSERT_TRUE(loop.add(std::move(request).value()).ok());
  std::vector<engines::denoise::DenoiseResult> done;
  while (done.empty()) done = loop.step((*pipeline)->denoiser(), 0);
  ASSERT_TRUE(done[0].status.ok());
  const media::Image image = (*pipeline)->decode(done[0].latent);
  EXPECT_EQ(image.width, 64);
  EXPECT_EQ(image.height, 48);
  const std::set<uint8_t> values(image.pixels.begin(), image.pixels.end());
  EXPECT_GT(values.size(), 16u) << "a flat image";
}

}  // namespace
}  // namespace prism::tools::demo

// Parity of the whole text-to-image pipeline (engines/denoise/image_pipeline, the denoise loop,
// frontends/image_frontend) with tests/reference/z_image_pipeline.py: a tiny random Z-Image
// directory in diffusers' layout (Qwen3 text encoder, Z-Image transformer, FLUX-style VAE,
// Z-Image-Turbo's scheduler config, a GPT-2 tokenizer with a Qwen3-style chat template) and the
// 8-bit images ZImagePipeline.__call__ makes from it in 4 steps with injected initial noise,
// without CFG (guidance 0) and with it (guidance 3, a negative prompt). This test tokenizes the
// prompts through ImageFrontend (the ids must equal the reference's), runs the DenoiseLoop with
// the same noise, decodes, and asserts every pixel within 1/255 at f32; bf16 figures are printed
// (max / mean pixel difference, PSNR) and bounded loosely.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engines/denoise/denoise_loop.h"
#include "engines/denoise/image_pipeline.h"
#include "frontends/image_frontend.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism {
namespace {

using engines::denoise::DenoiseLoop;
using engines::denoise::DenoiseRequest;
using engines::denoise::DenoiseResult;
using engines::denoise::ImagePipeline;

constexpr char kPrompt[] = "a red fox in the snow";  // as z_image_pipeline.py's PROMPT
constexpr char kNegative[] = "blurry, low quality";  // NEGATIVE
constexpr int kWidth = 40, kHeight = 24, kSteps = 4;

Result<std::string> generated() {
  return test::generate_reference("z_image_pipeline.py", "z_image_pipeline",
                                  "--tokenizer " + test::testdata_dir() + "/tokenizers/gpt2/tokenizer.json");
}

std::vector<int32_t> ids_of(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

struct PixelDiff {
  int max_abs = 0;
  double mean_abs = 0, psnr_db = 0;
};

PixelDiff diff(const media::Image& got, const Tensor& ref) {
  PixelDiff d;
  double sq = 0;
  const uint8_t* r = ref.data<uint8_t>();
  for (size_t i = 0; i < got.pixels.size(); ++i) {
    const int e = std::abs(int(got.pixels[i]) - int(r[i]));
    d.max_abs = std::max(d.max_abs, e);
    d.mean_abs += e;
    sq += double(e) * e;
  }
  d.mean_abs /= double(got.pixels.size());
  const double mse = sq / double(got.pixels.size());
  d.psnr_db = mse == 0 ? INFINITY : 10.0 * std::log10(255.0 * 255.0 / mse);
  return d;
}

class ZImagePipelineParity : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = generated();
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    dir_ = *dir;
    auto ref = test::open_reference(dir_);
    ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
    ref_ = *ref;
    serving::DeploymentConfig config;
    config.name = "tiny-z-image";
    config.task = "image";
    config.model = dir_;
    auto fe = frontends::ImageFrontend::load(config);
    ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
    frontend_ = *fe;
  }

  Tensor ref(const std::string& name) const {
    auto t = ref_->get(name);
    PRISM_CHECK_MSG(t.has_value(), t.status().to_string().c_str());
    return *t;
  }

  // The image the loop makes for one case; params as the api would resolve them.
  // latent_bound: the final latent's relative error against the reference's.
  media::Image run(const ImagePipeline& pipeline, const std::string& case_name, float guidance,
                   double latent_bound) const {
    frontends::ImageParams params = frontend_->defaults();
    params.width = kWidth;
    params.height = kHeight;
    params.steps = kSteps;
    params.guidance_scale = guidance;
    const Tensor cond = pipeline.encode_prompt(*frontend_->prompt_tokens(kPrompt));
    Tensor uncond;
    if (guidance > 0) uncond = pipeline.encode_prompt(*frontend_->prompt_tokens(kNegative));
    auto request = pipeline.make_request(7, params, 0, cond, uncond);
    PRISM_CHECK_MSG(request.has_value(), request.status().to_string().c_str());
    request->initial_noise = ref("noise_" + case_name);
    DenoiseLoop loop;
    PRISM_CHECK_MSG(loop.add(std::move(request).value()).ok(), "add");
    std::vector<DenoiseResult> done;
    for (int step = 0; done.empty(); ++step) {
      PRISM_CHECK_MSG(step <= kSteps, "the loop ran past its steps");
      done = loop.step(pipeline.denoiser(), 0);
    }
    PRISM_CHECK_MSG(done.size() == 1 && done[0].status.ok() && done[0].steps_done == kSteps, "one finished image");
    std::printf("  %s final latent: %s\n", case_name.c_str(),
                test::compare(done[0].latent, ref("latent_" + case_name)).to_string().c_str());
    EXPECT_TRUE(test::rel_error_within(done[0].latent, ref("latent_" + case_name), latent_bound)) << case_name << " latent";
    return pipeline.decode(done[0].latent);
  }

  std::string dir_;
  std::shared_ptr<const formats::SafetensorsFile> ref_;
  std::shared_ptr<const frontends::ImageFrontend> frontend_;
};

TEST_F(ZImagePipelineParity, PromptTokensAreTheReferences) {
  EXPECT_EQ(*frontend_->prompt_tokens(kPrompt), ids_of(ref("tokens_prompt")));
  EXPECT_EQ(*frontend_->prompt_tokens(kNegative), ids_of(ref("tokens_negative")));
  EXPECT_EQ(frontend_->size_multiple(), 4);  // VAE factor 2 x patch 2
}

TEST_F(ZImagePipelineParity, F32ImagesWithinOneLevel) {
  auto pipeline = ImagePipeline::load(dir_, {.precision = ops::Precision::f32});
  ASSERT_TRUE(pipeline.has_value()) << pipeline.status().to_string();
  for (const auto& [name, guidance] : {std::pair<std::string, float>{"plain", 0.0f}, {"cfg", 3.0f}}) {
    const media::Image image = run(**pipeline, name, guidance, 1e-4);
    ASSERT_EQ(image.width, kWidth);
    ASSERT_EQ(image.height, kHeight);
    const PixelDiff d = diff(image, ref("image_" + name));
    std::printf("f32 %-5s: max |pixel diff| %d, mean %.4f, PSNR %.1f dB\n", name.c_str(), d.max_abs, d.mean_abs,
                d.psnr_db);
    EXPECT_LE(d.max_abs, 1) << name;
  }
}

// bf16 linears in the text encoder and the transformer: figures printed; the bound only
// catches a broken path (a wrong image is ~40 levels off on average).
TEST_F(ZImagePipelineParity, Bf16ImagesClose) {
  auto pipeline = ImagePipeline::load(dir_, {.precision = ops::Precision::bf16});
  ASSERT_TRUE(pipeline.has_value()) << pipeline.status().to_string();
  for (const auto& [name, guidance] : {std::pair<std::string, float>{"plain", 0.0f}, {"cfg", 3.0f}}) {
    const media::Image image = run(**pipeline, name, guidance, 3e-2);
    const PixelDiff d = diff(image, ref("image_" + name));
    std::printf("bf16 %-5s: max |pixel diff| %d, mean %.4f, PSNR %.1f dB\n", name.c_str(), d.max_abs, d.mean_abs,
                d.psnr_db);
    EXPECT_LT(d.mean_abs, 4.0) << name;
  }
}

}  // namespace
}  // namespace prism

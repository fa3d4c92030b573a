// PSNR and SSIM on cases with closed forms: identical images, a uniform offset (MSE known;
// SSIM of flat images reduces to its luminance term), symmetry, and more noise scoring lower.
#include "media/image_quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace prism::media {
namespace {

Image flat(int w, int h, uint8_t v) { return Image{w, h, std::vector<uint8_t>(size_t(w) * h * 3, v)}; }

Image noisy(const Image& base, double sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, sigma);
  Image out = base;
  for (uint8_t& p : out.pixels) p = uint8_t(std::clamp(std::lround(p + n(rng)), 0l, 255l));
  return out;
}

TEST(ImageQuality, IdenticalImagesScorePerfect) {
  const Image a = noisy(flat(40, 30, 128), 30, 1);
  EXPECT_TRUE(std::isinf(psnr(a, a)));
  EXPECT_DOUBLE_EQ(ssim(a, a), 1.0);
}

TEST(ImageQuality, AUniformOffsetHasTheClosedForms) {
  const Image a = flat(32, 24, 100), b = flat(32, 24, 110);
  EXPECT_NEAR(psnr(a, b), 10 * std::log10(255.0 * 255.0 / 100.0), 1e-12);  // MSE 10^2
  // Flat images: no variance, so SSIM is the luminance term (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1).
  const double c1 = 2.55 * 2.55;
  EXPECT_NEAR(ssim(a, b), (2 * 100.0 * 110.0 + c1) / (100.0 * 100.0 + 110.0 * 110.0 + c1), 1e-9);
}

TEST(ImageQuality, MoreNoiseScoresLowerAndOrderDoesNotMatter) {
  const Image base = noisy(flat(64, 48, 120), 40, 2);  // textured
  const Image light = noisy(base, 3, 3), heavy = noisy(base, 25, 4);
  EXPECT_GT(psnr(base, light), psnr(base, heavy));
  EXPECT_GT(ssim(base, light), ssim(base, heavy));
  EXPECT_LT(ssim(base, heavy), 0.9);
  EXPECT_DOUBLE_EQ(psnr(base, heavy), psnr(heavy, base));
  EXPECT_NEAR(ssim(base, heavy), ssim(heavy, base), 1e-12);
  EXPECT_GT(ssim(flat(8, 8, 50), flat(8, 8, 50)), 0.999);  // smaller than the window: one window
}

}  // namespace
}  // namespace prism::media

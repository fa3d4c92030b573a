// media::resize against PIL 9.4's Image.resize (tests/reference/image_processors.py writes
// the cases: every filter, shrinking, enlarging, one axis each way, a single axis, a large
// shrink factor, on noisy gradients). The bar is exact: every pixel of every case equal.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "media/image_preprocess.h"
#include "test_util/reference_io.h"

namespace prism::media {
namespace {

Image image_from(const Tensor& t) {  // U8 [H, W, 3]
  Image image;
  image.height = int(t.size(0));
  image.width = int(t.size(1));
  const uint8_t* p = t.contiguous().data<uint8_t>();
  image.pixels.assign(p, p + t.numel());
  return image;
}

Image solid(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width) * height * 3);
  for (size_t i = 0; i < image.pixels.size(); i += 3) image.pixels[i] = r, image.pixels[i + 1] = g, image.pixels[i + 2] = b;
  return image;
}

TEST(ImageResize, EveryFilterMatchesPilExactly) {
  auto dir = test::generate_reference("image_processors.py", "image_resize_cases", "--cases resize");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto file = formats::SafetensorsFile::open(*dir + "/cases.safetensors");
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  const auto cases = nlohmann::json::parse((*file)->metadata().at("resize_cases"));
  ASSERT_EQ(cases.size(), 36u);  // 6 filters x 6 geometries
  int64_t pixels_compared = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const Image input = image_from(*(*file)->get("resize." + name + ".input"));
    const Image expected = image_from(*(*file)->get("resize." + name + ".output"));
    const Image got = resize(input, c["width"], c["height"], Resample(int(c["filter"])));
    ASSERT_EQ(got.width, expected.width);
    ASSERT_EQ(got.height, expected.height);
    int differing = 0, worst = 0;
    for (size_t i = 0; i < got.pixels.size(); ++i) {
      const int d = std::abs(int(got.pixels[i]) - int(expected.pixels[i]));
      differing += d != 0;
      worst = std::max(worst, d);
    }
    EXPECT_EQ(differing, 0) << "values differ from PIL, by up to " << worst;
    pixels_compared += int64_t(got.pixels.size());
  }
  EXPECT_GT(pixels_compared, 100000);
}

TEST(ImageResize, SameSizeIsACopy) {
  Image image = solid(5, 3, 10, 20, 30);
  image.pixels[7] = 99;
  for (Resample r : {Resample::nearest, Resample::bilinear, Resample::lanczos}) {
    const Image out = resize(image, 5, 3, r);
    EXPECT_EQ(out.pixels, image.pixels);
  }
}

TEST(ImageResize, SolidColourStaysSolidUnderEveryFilter) {
  // Normalised weights sum to one (to 22-bit rounding), so a flat image stays flat.
  const Image image = solid(33, 21, 200, 7, 128);
  for (int f = 0; f <= 5; ++f) {
    for (auto [w, h] : {std::pair{1, 1}, {7, 90}, {100, 4}}) {
      const Image out = resize(image, w, h, Resample(f));
      ASSERT_EQ(out.width, w);
      ASSERT_EQ(out.height, h);
      for (int i = 0; i < w * h; ++i) {
        ASSERT_EQ(out.pixels[i * 3 + 0], 200) << "filter " << f;
        ASSERT_EQ(out.pixels[i * 3 + 1], 7) << "filter " << f;
        ASSERT_EQ(out.pixels[i * 3 + 2], 128) << "filter " << f;
      }
    }
  }
}

TEST(ImageResize, OnePixelSourceAndOnePixelTarget) {
  const Image dot = solid(1, 1, 1, 2, 3);
  const Image big = resize(dot, 4, 6, Resample::bicubic);
  EXPECT_EQ(big.pixels, solid(4, 6, 1, 2, 3).pixels);
  Image two = solid(2, 1, 0, 0, 0);
  two.pixels[3] = two.pixels[4] = two.pixels[5] = 255;
  const Image one = resize(two, 1, 1, Resample::box);  // the mean, rounded half up
  EXPECT_EQ(one.pixels, (std::vector<uint8_t>{128, 128, 128}));
}

}  // namespace
}  // namespace prism::media

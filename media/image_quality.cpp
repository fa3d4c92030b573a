#include "media/image_quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"

namespace prism::media {
namespace {

constexpr int kWindow = 11;
constexpr double kSigma = 1.5;

std::vector<double> luma(const Image& image) {
  std::vector<double> y(size_t(image.num_pixels()));
  for (size_t i = 0; i < y.size(); ++i) {
    const uint8_t* p = &image.pixels[i * 3];
    y[i] = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
  }
  return y;
}

void check_same_size(const Image& a, const Image& b) {
  PRISM_CHECK_MSG(a.width == b.width && a.height == b.height && a.pixels.size() == b.pixels.size() &&
                      a.pixels.size() == size_t(a.num_pixels()) * 3,
                  "image quality: the images must be RGB of the same size");
}

}  // namespace

double psnr(const Image& a, const Image& b) {
  check_same_size(a, b);
  double se = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    const double d = double(a.pixels[i]) - double(b.pixels[i]);
    se += d * d;
  }
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(255.0 * 255.0 / (se / double(a.pixels.size())));
}

double ssim(const Image& a, const Image& b) {
  check_same_size(a, b);
  const std::vector<double> x = luma(a), y = luma(b);
  const int w = a.width, h = a.height;
  const int win_w = std::min(kWindow, w), win_h = std::min(kWindow, h);
  // A separable Gaussian window, normalised to sum 1 (over the window that fits).
  auto gaussian = [](int n) {
    std::vector<double> g(static_cast<size_t>(n), 0.0);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += g[size_t(i)] = std::exp(-0.5 * std::pow((i - (n - 1) / 2.0) / kSigma, 2));
    for (double& v : g) v /= sum;
    return g;
  };
  const std::vector<double> gx = gaussian(win_w), gy = gaussian(win_h);
  constexpr double c1 = (0.01 * 255) * (0.01 * 255), c2 = (0.03 * 255) * (0.03 * 255);
  double total = 0;
  int64_t count = 0;
  for (int r = 0; r + win_h <= h; ++r)
    for (int c = 0; c + win_w <= w; ++c) {
      double mx = 0, my = 0, xx = 0, yy = 0, xy = 0;
      for (int i = 0; i < win_h; ++i)
        for (int j = 0; j < win_w; ++j) {
          const double g = gy[size_t(i)] * gx[size_t(j)];
          const size_t k = size_t(r + i) * size_t(w) + size_t(c + j);
          mx += g * x[k];
          my += g * y[k];
          xx += g * x[k] * x[k];
          yy += g * y[k] * y[k];
          xy += g * x[k] * y[k];
        }
      const double vx = xx - mx * mx, vy = yy - my * my, cov = xy - mx * my;
      total += ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2));
      ++count;
    }
  return total / double(count);
}

}  // namespace prism::media

// resize(): PIL's Image.resize for RGB8, reproduced operation for operation so that pixels
// come out equal to PIL's (tests/media/image_resize_test.cpp checks every filter against
// PIL 9.4). Written here rather than taken from a library because the HF processors the
// models were trained with resize through PIL, and other resamplers (libswscale, stb) differ
// by a level or more on most pixels.
// NOTE: the arithmetic follows PIL's libImaging/Resample.c (and Geometry.c for NEAREST):
// coefficients in double, normalised per output pixel, rounded to 22-bit fixed point; each
// pass accumulates in int32 from a half-unit bias and clips to 0..255; the horizontal pass
// runs first, on the source rows the vertical pass reads. A pass whose size is unchanged is
// skipped, as in PIL. Single-threaded: it runs on the API's I/O threads, not on the pool.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "media/image_preprocess.h"
#include "media/image_resize_region.h"

namespace prism::media {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double box_filter(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double hamming_filter(double x) {
  if (x < 0.0) x = -x;
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  // PIL writes the window's constants as floats: keep their float values.
  return std::sin(x) / x * (double(0.54f) + double(0.46f) * std::cos(x));
}

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc_filter(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double lanczos_filter(double x) { return (-3.0 <= x && x < 3.0) ? sinc_filter(x) * sinc_filter(x / 3) : 0.0; }

struct Filter {
  double (*fn)(double);
  double support;
};

Filter filter_of(Resample r) {
  switch (r) {
    case Resample::box: return {box_filter, 0.5};
    case Resample::bilinear: return {bilinear_filter, 1.0};
    case Resample::hamming: return {hamming_filter, 1.0};
    case Resample::bicubic: return {bicubic_filter, 2.0};
    case Resample::lanczos: return {lanczos_filter, 3.0};
    case Resample::nearest: break;
  }
  PRISM_CHECK_MSG(false, "nearest has no convolution filter");
  return {};
}

// For each output pixel: the first source pixel, how many it reads, and ksize fixed-point
// weights (PIL's precompute_coeffs + normalize_coeffs_8bpc).
struct Coefficients {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // [out_size, ksize]
};

// Only output pixels [out_begin, out_end) of the out_size ones (entry 0 is out_begin).
Coefficients precompute(int in_size, int out_size, const Filter& filter, int out_begin, int out_end) {
  const double in0 = double(0.0f), in1 = double(float(in_size));  // PIL's box is float
  double scale = (in1 - in0) / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter.support * filterscale;
  Coefficients c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  const int n = out_end - out_begin;
  c.first.resize(n);
  c.count.resize(n);
  c.weights.assign(size_t(n) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int xx = out_begin; xx < out_end; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = filter.fn((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    int32_t* out = &c.weights[size_t(xx - out_begin) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[x] / ww : k[x];
      out[x] = v < 0 ? int32_t(-0.5 + v * (1 << kPrecisionBits)) : int32_t(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx - out_begin] = xmin;
    c.count[xx - out_begin] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t v) {
  v >>= kPrecisionBits;  // arithmetic: floors negatives, which then clip to 0
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// in: rows [row0, row0 + out.height) of a source `in_width` wide; out: its own width.
void resample_horizontal(const uint8_t* in, int in_width, int row0, const Coefficients& c, Image& out) {
  for (int y = 0; y < out.height; ++y) {
    const uint8_t* src = in + size_t(y + row0) * in_width * 3;
    uint8_t* dst = out.pixels.data() + size_t(y) * out.width * 3;
    for (int xx = 0; xx < out.width; ++xx) {
      const int32_t* k = &c.weights[size_t(xx) * c.ksize];
      const uint8_t* p = src + size_t(c.first[xx]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[xx]; ++x) {
        s0 += p[x * 3 + 0] * k[x];
        s1 += p[x * 3 + 1] * k[x];
        s2 += p[x * 3 + 2] * k[x];
      }
      dst[xx * 3 + 0] = clip8(s0);
      dst[xx * 3 + 1] = clip8(s1);
      dst[xx * 3 + 2] = clip8(s2);
    }
  }
}

// first[] of c is relative to `in`'s first row (already shifted by the caller). Rows of
// `in` are read `in_x0` pixels in, `out.width` pixels wide.
// NOTE: accumulates whole rows tap by tap (contiguous, vectorised); integer sums do not
// depend on their order and cannot overflow (|partial sums| <= 255 * sum|k| < 2^31), so
// the result is PIL's per-pixel sum exactly.
void resample_vertical(const Image& in, int in_x0, const Coefficients& c, Image& out) {
  const size_t row_bytes = size_t(out.width) * 3, in_row_bytes = size_t(in.width) * 3;
  std::vector<int32_t> acc(row_bytes);
  for (int yy = 0; yy < out.height; ++yy) {
    const int32_t* k = &c.weights[size_t(yy) * c.ksize];
    std::fill(acc.begin(), acc.end(), int32_t(1) << (kPrecisionBits - 1));
    for (int y = 0; y < c.count[yy]; ++y) {
      const uint8_t* src = in.pixels.data() + size_t(c.first[yy] + y) * in_row_bytes + size_t(in_x0) * 3;
      const int32_t w = k[y];
      int32_t* a = acc.data();
      for (size_t i = 0; i < row_bytes; ++i) a[i] += int32_t(src[i]) * w;
    }
    uint8_t* dst = out.pixels.data() + size_t(yy) * row_bytes;
    for (size_t i = 0; i < row_bytes; ++i) dst[i] = clip8(acc[i]);
  }
}

Image new_image(int width, int height) {
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width) * height * 3);
  return image;
}

// PIL's ImagingScaleAffine: source positions accumulate in double from half a step (the
// accumulation, not a product, decides the rounding, so it runs from 0 even for a region).
std::vector<int> nearest_sources(int in_size, int out_size, int begin, int end) {
  const double step = double(in_size) / out_size;
  std::vector<int> index(end - begin, -1);
  double pos = step * 0.5;
  for (int i = 0; i < end; ++i, pos += step) {
    const int src = pos < 0.0 ? -1 : int(pos);
    if (i >= begin && src >= 0 && src < in_size) index[i - begin] = src;
  }
  return index;
}

Image resize_nearest(const Image& in, int width, int height, const Region& r) {
  Image out = new_image(r.width, r.height);
  const std::vector<int> xs = nearest_sources(in.width, width, r.x, r.x + r.width);
  const std::vector<int> ys = nearest_sources(in.height, height, r.y, r.y + r.height);
  for (int y = 0; y < r.height; ++y) {
    if (ys[y] < 0) continue;  // stays 0, as PIL's fill
    const uint8_t* src = in.pixels.data() + size_t(ys[y]) * in.width * 3;
    uint8_t* dst = out.pixels.data() + size_t(y) * r.width * 3;
    for (int x = 0; x < r.width; ++x)
      if (xs[x] >= 0)
        for (int ch = 0; ch < 3; ++ch) dst[x * 3 + ch] = src[xs[x] * 3 + ch];
  }
  return out;
}

}  // namespace

Image resize_region(const Image& image, int width, int height, Resample filter, const Region& region) {
  PRISM_CHECK(width > 0 && height > 0 && image.width > 0 && image.height > 0);
  PRISM_CHECK(image.pixels.size() == size_t(image.num_pixels()) * 3);
  const Region& r = region;
  PRISM_CHECK(r.x >= 0 && r.y >= 0 && r.width > 0 && r.height > 0 && r.x + r.width <= width &&
              r.y + r.height <= height);
  if (width == image.width && height == image.height) {  // PIL copies
    Image out = new_image(r.width, r.height);
    for (int y = 0; y < r.height; ++y)
      std::copy_n(&image.pixels[(size_t(r.y + y) * image.width + r.x) * 3], size_t(r.width) * 3,
                  &out.pixels[size_t(y) * r.width * 3]);
    return out;
  }
  if (filter == Resample::nearest) return resize_nearest(image, width, height, r);

  const Filter f = filter_of(filter);
  const bool need_horizontal = width != image.width;
  const bool need_vertical = height != image.height;
  // Without a vertical pass the rows are the source's own: the region's rows, one each.
  Coefficients vertical = need_vertical ? precompute(image.height, height, f, r.y, r.y + r.height) : Coefficients{};
  const int row_first = need_vertical ? vertical.first[0] : r.y;
  const int row_last =
      need_vertical ? vertical.first[r.height - 1] + vertical.count[r.height - 1] : r.y + r.height;

  Image horizontal_out;
  const Image* source = &image;
  if (need_horizontal) {
    // NOTE: only the source rows the vertical pass reads, as PIL's ybox_first..ybox_last.
    const Coefficients horizontal = precompute(image.width, width, f, r.x, r.x + r.width);
    horizontal_out = new_image(r.width, row_last - row_first);
    resample_horizontal(image.pixels.data(), image.width, row_first, horizontal, horizontal_out);
    for (int& first : vertical.first) first -= row_first;
    source = &horizontal_out;
  }
  if (!need_vertical) return horizontal_out;
  Image out = new_image(r.width, r.height);
  // Without a horizontal pass the vertical one reads the region's columns of the source.
  resample_vertical(*source, need_horizontal ? 0 : r.x, vertical, out);
  return out;
}

Image resize(const Image& image, int width, int height, Resample filter) {
  return resize_region(image, width, height, filter, Region{0, 0, width, height});
}

}  // namespace prism::media

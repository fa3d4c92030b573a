// PNG through libpng: any bit depth, palette, gray, alpha, interlace, into RGB8 the way PIL's
// convert("RGB") sees the file: palette and gray expanded, 16-bit samples cut to their high
// byte, alpha dropped keeping the colour under it, gamma and background chunks ignored.
// NOTE: libpng reports errors by longjmp. Every function that calls setjmp holds only plain
// C values, so the jump skips no destructor; C++ objects live in the callers.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "media/image_codecs.h"

namespace prism::media {

namespace {

struct PngSource {  // the C callbacks' view of the input
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void png_read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the file is truncated");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

void png_fail(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", message);
  png_longjmp(png, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

struct PngHeader {
  png_uint_32 width, height;
};

bool png_read_header(png_structp png, png_infop info, PngHeader* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  // Our own limits give the error message; libpng's default caps would fire first otherwise.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  header->width = png_get_image_width(png, info);
  header->height = png_get_image_height(png, info);
  return true;
}

// rows: height pointers into the RGB8 output, each width * 3 bytes.
bool png_read_rgb(png_structp png, png_infop info, png_bytepp rows, png_uint_32 width) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_expand(png);       // palette -> RGB, gray < 8 bits -> 8, tRNS -> alpha
  png_set_strip_16(png);     // 16-bit -> the high byte, as PIL does
  png_set_strip_alpha(png);  // drop alpha, keep the colour (PIL's convert("RGB"))
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != size_t(width) * 3) png_error(png, "unexpected row layout after conversion");
  png_read_image(png, rows);
  return true;
}

struct PngSink {
  std::vector<uint8_t>* out;  // not owned
};

void png_write_bytes(png_structp png, png_bytep data, size_t n) {
  auto* sink = static_cast<PngSink*>(png_get_io_ptr(png));
  sink->out->insert(sink->out->end(), data, data + n);
}

void png_flush_nothing(png_structp) {}

bool png_write_rgb(png_structp png, png_infop info, int width, int height, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, png_uint_32(width), png_uint_32(height), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

}  // namespace

namespace codecs {

Result<Image> decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  PngSource src{bytes.data(), bytes.size(), 0, {}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_ignore_warning);
  if (!png) return internal_error("libpng: cannot create a reader");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return internal_error("libpng: cannot create an info struct");
  }
  png_set_read_fn(png, &src, png_read_bytes);

  Result<Image> result = Image{};
  PngHeader header{};
  if (!png_read_header(png, info, &header)) {
    result = invalid_argument(std::string("is a corrupt PNG image (") + src.message + ")");
  } else if (Status s = check_image_size(header.width, header.height, limits, "PNG"); !s.ok()) {
    result = s;
  } else {
    Image& image = *result;
    image.width = int(header.width);
    image.height = int(header.height);
    image.pixels.resize(size_t(image.width) * image.height * 3);
    std::vector<png_bytep> rows(image.height);
    for (int y = 0; y < image.height; ++y) rows[y] = image.pixels.data() + size_t(y) * image.width * 3;
    if (!png_read_rgb(png, info, rows.data(), header.width))
      result = invalid_argument(std::string("is a corrupt PNG image (") + src.message + ")");
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return result;
}

}  // namespace codecs

std::vector<uint8_t> encode_png(const Image& image) {
  PRISM_CHECK(image.width > 0 && image.height > 0 && image.pixels.size() == size_t(image.num_pixels()) * 3);
  std::vector<uint8_t> out;
  PngSink sink{&out};
  PngSource errors{nullptr, 0, 0, {}};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &errors, png_fail, png_ignore_warning);
  PRISM_CHECK(png != nullptr);
  png_infop info = png_create_info_struct(png);
  PRISM_CHECK(info != nullptr);
  png_set_write_fn(png, &sink, png_write_bytes, png_flush_nothing);
  std::vector<png_bytep> rows(image.height);
  for (int y = 0; y < image.height; ++y)
    rows[y] = const_cast<png_bytep>(image.pixels.data() + size_t(y) * image.width * 3);
  const bool ok = png_write_rgb(png, info, image.width, image.height, rows.data());
  png_destroy_write_struct(&png, &info);
  PRISM_CHECK_MSG(ok, "libpng failed to encode a valid image");
  return out;
}

}  // namespace prism::media

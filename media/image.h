// media/image.h: a decoded still image and the codecs that produce it. Plain arrays, no
// tensors: api/ decodes on its I/O threads, engines/ and models/ take it from there.
// Decoding guards against decompression bombs: the header's dimensions are checked against
// the limits before any pixel is decoded, and a file that decodes to more than it declared is
// refused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::media {

// 8-bit RGB, interleaved, rows top to bottom: pixels[(y * width + x) * 3 + c].
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;

  int64_t num_pixels() const { return int64_t(width) * height; }
};

enum class ImageFormat : uint8_t { png, jpeg, webp, gif };
std::string_view image_format_name(ImageFormat format);

struct ImageLimits {
  int64_t max_pixels = 40'000'000;    // width * height (a 40 MP photo passes; a bomb does not)
  int max_side = 16384;               // either dimension
  int64_t max_bytes = 64ll << 20;     // the encoded file
};

// The format from the file's magic bytes; invalid_argument naming what was found otherwise
// ("is not a PNG, JPEG, WebP or GIF image").
Result<ImageFormat> sniff_image_format(std::span<const uint8_t> bytes);

// Decodes PNG (any bit depth, palette, gray, alpha), JPEG (baseline, progressive, gray, CMYK),
// WebP (lossy, lossless, the first frame of an animation) or GIF (the first frame) into RGB.
// Alpha is dropped, keeping the colour under it, as PIL's convert("RGB") does (what HF
// processors call).
// Errors are invalid_argument and say what is wrong: "is a corrupt PNG image (...)", "is
// 20000x20000 pixels, more than the limit of 40000000 pixels". Messages are predicates: the
// caller prefixes the part's name ("messages[0].content[1] " + message).
Result<Image> decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {});

// Encoders (PNG via libpng; JPEG via libjpeg and WebP via libwebp at `quality` 0-100, WebP's
// 100 lossless): generated images, tests and demos.
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 95);
std::vector<uint8_t> encode_webp(const Image& image, int quality = 100);

}  // namespace prism::media

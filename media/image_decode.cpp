// decode_image: sniffs the format from the magic bytes, applies the byte limit and hands the
// bytes to that format's decoder (media/codec_*.cpp). It decodes nothing itself.
#include <cstring>
#include <string>

#include "media/image.h"
#include "media/image_codecs.h"

namespace prism::media {

namespace {

bool starts_with(std::span<const uint8_t> bytes, const char* magic, size_t n, size_t offset = 0) {
  return bytes.size() >= offset + n && std::memcmp(bytes.data() + offset, magic, n) == 0;
}

// A name for formats we recognise but do not decode, so the error says what was sent.
const char* unsupported_format(std::span<const uint8_t> bytes) {
  if (starts_with(bytes, "BM", 2)) return "BMP";
  if (starts_with(bytes, "II*\0", 4) || starts_with(bytes, "MM\0*", 4)) return "TIFF";
  if (starts_with(bytes, "ftypavif", 8, 4) || starts_with(bytes, "ftypavis", 8, 4)) return "AVIF";
  if (starts_with(bytes, "ftypheic", 8, 4) || starts_with(bytes, "ftypheix", 8, 4) ||
      starts_with(bytes, "ftypmif1", 8, 4))
    return "HEIF";
  if (starts_with(bytes, "%PDF", 4)) return "PDF";
  if (starts_with(bytes, "<svg", 4) || starts_with(bytes, "<?xml", 5)) return "SVG/XML";
  return nullptr;
}

}  // namespace

std::string_view image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::png: return "PNG";
    case ImageFormat::jpeg: return "JPEG";
    case ImageFormat::webp: return "WebP";
    case ImageFormat::gif: return "GIF";
  }
  return "?";
}

Result<ImageFormat> sniff_image_format(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return invalid_argument("is empty (0 bytes), not an image");
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::png;
  if (starts_with(bytes, "\xff\xd8\xff", 3)) return ImageFormat::jpeg;
  if (starts_with(bytes, "RIFF", 4) && starts_with(bytes, "WEBP", 4, 8)) return ImageFormat::webp;
  if (starts_with(bytes, "GIF87a", 6) || starts_with(bytes, "GIF89a", 6)) return ImageFormat::gif;
  if (const char* name = unsupported_format(bytes))
    return invalid_argument(std::string("is a ") + name + " file; only PNG, JPEG, WebP and GIF images are supported");
  return invalid_argument("is not a PNG, JPEG, WebP or GIF image");
}

Result<Image> decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  if (int64_t(bytes.size()) > limits.max_bytes)
    return invalid_argument("is " + std::to_string(bytes.size()) + " bytes, more than the limit of " +
                            std::to_string(limits.max_bytes) + " bytes");
  PRISM_ASSIGN_OR_RETURN(const ImageFormat format, sniff_image_format(bytes));
  switch (format) {
    case ImageFormat::png: return codecs::decode_png(bytes, limits);
    case ImageFormat::jpeg: return codecs::decode_jpeg(bytes, limits);
    case ImageFormat::webp: return codecs::decode_webp(bytes, limits);
    case ImageFormat::gif: return codecs::decode_gif(bytes, limits);
  }
  return internal_error("unknown image format");
}

namespace codecs {

Status check_image_size(int64_t width, int64_t height, const ImageLimits& limits, const char* format) {
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (width <= 0 || height <= 0) return invalid_argument(std::string("is an empty ") + size + " " + format + " image");
  if (width > limits.max_side || height > limits.max_side)
    return invalid_argument("is " + size + " pixels, more than the limit of " + std::to_string(limits.max_side) +
                            " pixels on a side");
  if (width * height > limits.max_pixels)
    return invalid_argument("is " + size + " pixels, more than the limit of " + std::to_string(limits.max_pixels) +
                            " pixels");
  return Status();
}

}  // namespace codecs

}  // namespace prism::media

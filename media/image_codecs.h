// media/image_codecs.h: one decoder per still-image format, behind decode_image (image.h),
// which sniffs the format and calls one of these. Each decoder reads the header first and
// calls check_image_size before it allocates or decodes a pixel (the decompression-bomb
// guard); errors are invalid_argument predicates ("is a corrupt PNG image (...)"). Internal to
// media/: callers use decode_image.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "media/image.h"

namespace prism::media::codecs {

// ok when width x height fits `limits`; else invalid_argument "is WxH pixels, more than ...".
// Dimensions of 0 or less are "has an empty WxH <format> canvas".
Status check_image_size(int64_t width, int64_t height, const ImageLimits& limits, const char* format);

Result<Image> decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits);
Result<Image> decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits);
Result<Image> decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits);
Result<Image> decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits);

}  // namespace prism::media::codecs

// WebP through libwebp: lossy, lossless and alpha stills decode straight to RGB (alpha
// dropped, colour kept); an animation decodes its first frame composited on the canvas
// (libwebpdemux's WebPAnimDecoder), as PIL's first frame. The canvas size from the header is
// checked before anything is allocated. Encoding (generated images) is lossy at a quality, or
// lossless.
#include <webp/decode.h>
#include <webp/encode.h>
#include <webp/demux.h>

#include <string>

#include "base/check.h"
#include "media/image_codecs.h"

namespace prism::media {
namespace codecs {

namespace {

std::string describe(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "the file is truncated";
    default: return "error " + std::to_string(int(status));
  }
}

Result<Image> decode_first_frame(std::span<const uint8_t> bytes, Image image) {
  const WebPData data{bytes.data(), bytes.size()};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return internal_error("libwebp: version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  WebPAnimDecoder* decoder = WebPAnimDecoderNew(&data, &options);
  if (!decoder) return invalid_argument("is a corrupt WebP animation");
  WebPAnimInfo info;
  uint8_t* canvas = nullptr;
  int timestamp = 0;
  Result<Image> result = invalid_argument("is a corrupt WebP animation (its first frame does not decode)");
  if (WebPAnimDecoderGetInfo(decoder, &info) && int(info.canvas_width) == image.width &&
      int(info.canvas_height) == image.height && WebPAnimDecoderGetNext(decoder, &canvas, &timestamp)) {
    const size_t n = size_t(image.width) * image.height;
    for (size_t i = 0; i < n; ++i)
      for (int c = 0; c < 3; ++c) image.pixels[i * 3 + c] = canvas[i * 4 + c];
    result = std::move(image);
  }
  WebPAnimDecoderDelete(decoder);
  return result;
}

}  // namespace

Result<Image> decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status != VP8_STATUS_OK) return invalid_argument("is a corrupt WebP image (" + describe(status) + ")");
  PRISM_RETURN_IF_ERROR(check_image_size(features.width, features.height, limits, "WebP"));
  Image image;
  image.width = features.width;
  image.height = features.height;
  image.pixels.resize(size_t(image.width) * image.height * 3);
  if (features.has_animation) return decode_first_frame(bytes, std::move(image));
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return internal_error("libwebp: version mismatch");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;  // straight into image.pixels
  config.output.u.RGBA.rgba = image.pixels.data();
  config.output.u.RGBA.stride = image.width * 3;
  config.output.u.RGBA.size = image.pixels.size();
  const VP8StatusCode decoded = WebPDecode(bytes.data(), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (decoded != VP8_STATUS_OK) return invalid_argument("is a corrupt WebP image (" + describe(decoded) + ")");
  return image;
}

}  // namespace codecs

std::vector<uint8_t> encode_webp(const Image& image, int quality) {
  PRISM_CHECK(image.width > 0 && image.height > 0 && image.pixels.size() == size_t(image.num_pixels()) * 3);
  PRISM_CHECK(quality >= 0 && quality <= 100);
  uint8_t* buffer = nullptr;
  // 100 is lossless, as OpenAI's output_compression 100 means no loss.
  const size_t size = quality == 100
                          ? WebPEncodeLosslessRGB(image.pixels.data(), image.width, image.height, image.width * 3, &buffer)
                          : WebPEncodeRGB(image.pixels.data(), image.width, image.height, image.width * 3,
                                          float(quality), &buffer);
  PRISM_CHECK_MSG(size > 0, "libwebp failed to encode an image");
  std::vector<uint8_t> out(buffer, buffer + size);
  WebPFree(buffer);
  return out;
}

}  // namespace prism::media

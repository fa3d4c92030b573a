#include "media/exif_orientation.h"

#include <cstring>

namespace prism::media {

namespace {

// Little- or big-endian reads inside the TIFF block; out of range reads 0 (then ignored).
struct Tiff {
  const uint8_t* data;
  size_t size;
  bool little;

  uint32_t u16(size_t at) const {
    if (at + 2 > size) return 0;
    return little ? uint32_t(data[at]) | uint32_t(data[at + 1]) << 8 : uint32_t(data[at]) << 8 | uint32_t(data[at + 1]);
  }
  uint32_t u32(size_t at) const {
    if (at + 4 > size) return 0;
    return little ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  }
};

}  // namespace

int exif_orientation(std::span<const uint8_t> app1) {
  constexpr uint8_t kExif[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (app1.size() < 6 + 8 || std::memcmp(app1.data(), kExif, 6) != 0) return 1;
  Tiff tiff{app1.data() + 6, app1.size() - 6, false};
  if (tiff.data[0] == 'I' && tiff.data[1] == 'I') tiff.little = true;
  else if (!(tiff.data[0] == 'M' && tiff.data[1] == 'M')) return 1;
  if (tiff.u16(2) != 42) return 1;
  const size_t ifd = tiff.u32(4);
  const uint32_t entries = tiff.u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + size_t(i) * 12;
    if (entry + 12 > tiff.size) return 1;
    if (tiff.u16(entry) != 0x0112) continue;              // Orientation
    if (tiff.u16(entry + 2) != 3 || tiff.u32(entry + 4) != 1) return 1;  // one SHORT
    const uint32_t value = tiff.u16(entry + 8);
    return value >= 1 && value <= 8 ? int(value) : 1;
  }
  return 1;
}

Image apply_exif_orientation(Image image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int w = image.width, h = image.height;
  const bool swap = orientation >= 5;
  Image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.pixels.resize(image.pixels.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // the source pixel PIL's transpose reads for (x, y)
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                      // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x, sy = h - 1 - y; break;      // ROTATE_180
        case 4: sy = h - 1 - y; break;                      // FLIP_TOP_BOTTOM
        case 5: sx = y, sy = x; break;                      // TRANSPOSE
        case 6: sx = y, sy = h - 1 - x; break;              // ROTATE_270 (90 clockwise)
        case 7: sx = w - 1 - y, sy = h - 1 - x; break;      // TRANSVERSE
        case 8: sx = w - 1 - y, sy = x; break;              // ROTATE_90 (90 counter-clockwise)
      }
      std::memcpy(&out.pixels[(size_t(y) * out.width + x) * 3], &image.pixels[(size_t(sy) * w + sx) * 3], 3);
    }
  }
  return out;
}

}  // namespace prism::media

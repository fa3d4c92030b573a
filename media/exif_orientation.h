// media/exif_orientation.h: the EXIF Orientation tag (what a phone writes instead of rotating
// the pixels) and the transpose that undoes it, as transformers' load_image does with PIL's
// ImageOps.exif_transpose before any processor sees the image. Parsing is bounds-checked: a
// broken EXIF block means orientation 1 (as stored), never an error.
#pragma once

#include <cstdint>
#include <span>

#include "media/image.h"

namespace prism::media {

// The Orientation (1..8) in an APP1 payload ("Exif\0\0" + TIFF); 1 when absent or unreadable.
int exif_orientation(std::span<const uint8_t> app1_payload);

// The image as it is meant to be seen: orientation 2..8 flipped / rotated (5..8 swap width
// and height); 1 and unknown values leave it as it is.
Image apply_exif_orientation(Image image, int orientation);

}  // namespace prism::media

// GIF through giflib: the first frame only, read record by record (never the whole file, so an
// animation of thousands of frames costs one frame). As PIL's first frame converted to RGB:
// the logical screen is the canvas, filled with the transparent index (else index 0) where
// the frame does not cover it; indices map through the frame's palette (local, else global);
// a transparent pixel keeps its palette colour (alpha is dropped); no palette means gray.
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "media/image_codecs.h"

namespace prism::media::codecs {

namespace {

struct GifSource {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
};

int gif_read_bytes(GifFileType* gif, GifByteType* out, int n) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  const size_t count = std::min(size_t(n < 0 ? 0 : n), src->bytes.size() - src->pos);
  std::memcpy(out, src->bytes.data() + src->pos, count);
  src->pos += count;
  return int(count);
}

Status gif_error(int code) {
  const char* text = GifErrorString(code);
  return invalid_argument(std::string("is a corrupt GIF image (") + (text ? text : "unknown error") + ")");
}

struct GifCloser {
  GifFileType* gif;
  ~GifCloser() {
    int ignored = 0;
    if (gif) DGifCloseFile(gif, &ignored);
  }
};

// The transparent index a Graphic Control Extension declares, or -1.
int transparent_index(int code, const GifByteType* ext) {
  if (code != GRAPHICS_EXT_FUNC_CODE || !ext || ext[0] < 4) return -1;
  return (ext[1] & 0x01) ? int(ext[4]) : -1;
}

// Reads rows of the frame (interlaced or not) into `indices` [height][width].
Status read_frame_indices(GifFileType* gif, int width, int height, bool interlaced, std::vector<GifByteType>& indices) {
  indices.assign(size_t(width) * height, 0);
  auto read_row = [&](int y) -> Status {
    if (DGifGetLine(gif, indices.data() + size_t(y) * width, width) == GIF_ERROR) return gif_error(gif->Error);
    return Status();
  };
  if (!interlaced) {
    for (int y = 0; y < height; ++y) PRISM_RETURN_IF_ERROR(read_row(y));
    return Status();
  }
  static constexpr int kStart[4] = {0, 4, 2, 1}, kStep[4] = {8, 8, 4, 2};
  for (int pass = 0; pass < 4; ++pass)
    for (int y = kStart[pass]; y < height; y += kStep[pass]) PRISM_RETURN_IF_ERROR(read_row(y));
  return Status();
}

}  // namespace

Result<Image> decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  GifSource src{bytes};
  int error = 0;
  GifCloser file{DGifOpen(&src, gif_read_bytes, &error)};
  if (!file.gif) return gif_error(error);
  GifFileType* gif = file.gif;

  int transparent = -1;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return gif_error(gif->Error);
    if (type == TERMINATE_RECORD_TYPE) return invalid_argument("is a GIF image without any frame");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR) return gif_error(gif->Error);
      if (int t = transparent_index(code, ext); t >= 0) transparent = t;
      while (ext) {
        if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR) return gif_error(gif->Error);
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR) return gif_error(gif->Error);
    break;
  }

  const GifImageDesc& desc = gif->Image;
  // A screen of 0 (seen in the wild) means "the frame's size".
  const int64_t canvas_w = gif->SWidth > 0 ? gif->SWidth : int64_t(desc.Left) + desc.Width;
  const int64_t canvas_h = gif->SHeight > 0 ? gif->SHeight : int64_t(desc.Top) + desc.Height;
  PRISM_RETURN_IF_ERROR(check_image_size(canvas_w, canvas_h, limits, "GIF"));
  PRISM_RETURN_IF_ERROR(check_image_size(desc.Width, desc.Height, limits, "GIF frame"));

  std::vector<GifByteType> indices;
  PRISM_RETURN_IF_ERROR(read_frame_indices(gif, desc.Width, desc.Height, desc.Interlace, indices));

  const ColorMapObject* palette = desc.ColorMap ? desc.ColorMap : gif->SColorMap;
  auto colour = [&](int index, uint8_t* out) {
    if (!palette) {
      out[0] = out[1] = out[2] = uint8_t(index);
    } else if (index < palette->ColorCount) {
      const GifColorType& c = palette->Colors[index];
      out[0] = c.Red, out[1] = c.Green, out[2] = c.Blue;
    } else {
      out[0] = out[1] = out[2] = 0;
    }
  };

  Image image;
  image.width = int(canvas_w);
  image.height = int(canvas_h);
  image.pixels.resize(size_t(image.width) * image.height * 3);
  uint8_t fill[3];
  colour(transparent >= 0 ? transparent : 0, fill);
  for (size_t i = 0; i < size_t(image.num_pixels()); ++i) std::memcpy(&image.pixels[i * 3], fill, 3);
  // The frame may lie partly outside the screen: only the overlap is drawn.
  const int x0 = std::max(0, desc.Left), y0 = std::max(0, desc.Top);
  const int x1 = int(std::min<int64_t>(canvas_w, int64_t(desc.Left) + desc.Width));
  const int y1 = int(std::min<int64_t>(canvas_h, int64_t(desc.Top) + desc.Height));
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x)
      colour(indices[size_t(y - desc.Top) * desc.Width + (x - desc.Left)], &image.pixels[(size_t(y) * image.width + x) * 3]);
  return image;
}

}  // namespace prism::media::codecs

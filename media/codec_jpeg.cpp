// JPEG through libjpeg(-turbo), with the library defaults PIL uses (islow DCT, fancy
// upsampling), so pixels match PIL's. Gray is replicated to RGB; CMYK and YCCK go through
// PIL's CMYK -> RGB formula (Adobe files store inverted CMYK, as PIL assumes). An EXIF
// orientation is applied (exif_orientation.h). A file that ends early is refused (libjpeg
// would fill the rest with gray, PIL raises "truncated").
// NOTE: libjpeg reports errors by longjmp. Every function that calls setjmp holds only plain
// C values, so the jump skips no destructor; C++ objects live in the callers.
#include <cstdio>
// clang-format off: jpeglib.h needs <cstdio> first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <cstdlib>
#include <vector>

#include "base/check.h"
#include "media/exif_orientation.h"
#include "media/image_codecs.h"

namespace prism::media {

namespace {

// A progressive file can hold thousands of tiny scans that cost a full pass each (a CPU bomb).
// Real encoders write about 10; libjpeg-turbo's documentation suggests refusing past a few
// hundred.
constexpr int kMaxScans = 500;

struct JpegErrors {
  jpeg_error_mgr mgr;  // first: libjpeg casts cinfo->err to this
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 32];
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings are tolerated (PIL tolerates them) except the end of the file arriving early.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(errors->message, sizeof errors->message, "the file is truncated");
    std::longjmp(errors->jump, 1);
  }
}

void jpeg_limit_scans(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number > kMaxScans) {
      auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
      std::snprintf(errors->message, sizeof errors->message, "more than %d progressive scans", kMaxScans);
      std::longjmp(errors->jump, 1);
    }
  }
}

bool jpeg_read_header_only(jpeg_decompress_struct* cinfo, JpegErrors* errors) {
  if (setjmp(errors->jump)) return false;
  jpeg_read_header(cinfo, TRUE);
  return true;
}

// PIL's cmyk2rgb: r = (255 - k) - round((255 - k) * c / 255), with c, k as PIL stores them.
inline uint8_t cmyk_channel(int c, int nk) {
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// rows: output rows of width * 3 bytes; cmyk_row: width * 4 bytes of scratch (CMYK input).
bool jpeg_read_rgb(jpeg_decompress_struct* cinfo, JpegErrors* errors, uint8_t* const* rows, uint8_t* cmyk_row) {
  if (setjmp(errors->jump)) return false;
  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(cinfo);
  if (cinfo->output_components != (cmyk ? 4 : 3)) ERREXIT(cinfo, JERR_BAD_J_COLORSPACE);
  const bool inverted = cinfo->saw_Adobe_marker;  // Adobe writes 255 - ink
  while (cinfo->output_scanline < cinfo->output_height) {
    uint8_t* row = rows[cinfo->output_scanline];
    JSAMPROW target = cmyk ? cmyk_row : row;
    jpeg_read_scanlines(cinfo, &target, 1);
    if (!cmyk) continue;
    for (JDIMENSION x = 0; x < cinfo->output_width; ++x) {
      const uint8_t* p = cmyk_row + x * 4;
      const int k = inverted ? 255 - p[3] : p[3];
      const int nk = 255 - k;
      for (int c = 0; c < 3; ++c) row[x * 3 + c] = cmyk_channel(inverted ? 255 - p[c] : p[c], nk);
    }
  }
  return true;
}

bool jpeg_write_rgb(jpeg_compress_struct* cinfo, JpegErrors* errors, int quality, uint8_t* const* rows) {
  if (setjmp(errors->jump)) return false;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, quality, TRUE);
  jpeg_start_compress(cinfo, TRUE);
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = rows[cinfo->next_scanline];
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

namespace codecs {

Result<Image> decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_fail;
  errors.mgr.emit_message = jpeg_message;
  errors.message[0] = '\0';
  jpeg_progress_mgr progress{};
  progress.progress_monitor = jpeg_limit_scans;
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);  // EXIF, for the orientation

  Result<Image> result = Image{};
  if (!jpeg_read_header_only(&cinfo, &errors)) {
    result = invalid_argument(std::string("is a corrupt JPEG image (") + errors.message + ")");
  } else if (Status s = check_image_size(cinfo.image_width, cinfo.image_height, limits, "JPEG"); !s.ok()) {
    result = s;
  } else {
    Image& image = *result;
    image.width = int(cinfo.image_width);
    image.height = int(cinfo.image_height);
    image.pixels.resize(size_t(image.width) * image.height * 3);
    std::vector<uint8_t*> rows(image.height);
    for (int y = 0; y < image.height; ++y) rows[y] = image.pixels.data() + size_t(y) * image.width * 3;
    std::vector<uint8_t> cmyk_row(size_t(image.width) * 4);
    if (!jpeg_read_rgb(&cinfo, &errors, rows.data(), cmyk_row.data())) {
      result = invalid_argument(std::string("is a corrupt JPEG image (") + errors.message + ")");
    } else {
      // Upright, as transformers' load_image (exif_transpose) hands images to processors.
      int orientation = 1;
      for (jpeg_saved_marker_ptr m = cinfo.marker_list; m && orientation == 1; m = m->next)
        if (m->marker == JPEG_APP0 + 1) orientation = exif_orientation({m->data, m->data_length});
      if (orientation != 1) result = apply_exif_orientation(std::move(image), orientation);
    }
  }
  jpeg_destroy_decompress(&cinfo);
  return result;
}

}  // namespace codecs

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  PRISM_CHECK(image.width > 0 && image.height > 0 && image.pixels.size() == size_t(image.num_pixels()) * 3);
  jpeg_compress_struct cinfo;
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_fail;
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = JDIMENSION(image.width);
  cinfo.image_height = JDIMENSION(image.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  std::vector<uint8_t*> rows(image.height);
  for (int y = 0; y < image.height; ++y)
    rows[y] = const_cast<uint8_t*>(image.pixels.data() + size_t(y) * image.width * 3);
  const bool ok = jpeg_write_rgb(&cinfo, &errors, quality < 1 ? 1 : quality > 100 ? 100 : quality, rows.data());
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out;
  if (ok) out.assign(buffer, buffer + size);
  std::free(buffer);
  PRISM_CHECK_MSG(ok, "libjpeg failed to encode a valid image");
  return out;
}

}  // namespace prism::media

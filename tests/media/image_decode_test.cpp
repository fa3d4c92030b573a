// media::decode_image: every format and variant against PIL's decode of files PIL wrote
// (tests/reference/image_processors.py --cases codecs), variants written here with libpng,
// libwebp and giflib, decompression-bomb headers refused before decoding, and truncated,
// bit-flipped and non-image bytes refused without a crash.
#include <gtest/gtest.h>

#include <gif_lib.h>
#include <png.h>
#include <webp/encode.h>

#include <cmath>
#include <csetjmp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/safetensors.h"
#include "media/exif_orientation.h"
#include "media/image.h"
#include "test_util/reference_io.h"

namespace prism::media {
namespace {

using Bytes = std::vector<uint8_t>;

Image noise_image(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width) * height * 3);
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    const int smooth = int((i / 3) % width) * 200 / width;  // a gradient under the noise
    image.pixels[i] = uint8_t(std::clamp(smooth + int(rng() % 56), 0, 255));
  }
  return image;
}

Image image_from(const Tensor& t) {  // U8 [H, W, 3]
  Image image;
  image.height = int(t.size(0));
  image.width = int(t.size(1));
  const uint8_t* p = t.contiguous().data<uint8_t>();
  image.pixels.assign(p, p + t.numel());
  return image;
}

Image decoded(const Bytes& bytes, const ImageLimits& limits = {}) {
  auto image = decode_image(bytes, limits);
  EXPECT_TRUE(image.has_value()) << image.status().to_string();
  return image.has_value() ? *image : Image{};
}

std::string error_of(const Bytes& bytes, const ImageLimits& limits = {}) {
  auto image = decode_image(bytes, limits);
  EXPECT_FALSE(image.has_value());
  if (image.has_value()) return "";
  EXPECT_EQ(image.status().code(), StatusCode::invalid_argument) << image.status().to_string();
  return image.status().message();
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// ---- writers for variants our encoders do not produce -----------------------------------

struct PngSpec {
  int width = 0, height = 0, color_type = PNG_COLOR_TYPE_RGB, bit_depth = 8;
  bool interlaced = false;
  std::vector<png_color> palette;
  std::vector<uint8_t> trns;  // palette alpha
  std::vector<uint8_t> rows;  // packed rows as libpng takes them
};

PngSpec png_spec(int width, int height, int color_type, int bit_depth, bool interlaced = false) {
  PngSpec s;
  s.width = width, s.height = height, s.color_type = color_type, s.bit_depth = bit_depth, s.interlaced = interlaced;
  return s;
}

void append_png_bytes(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

// libpng's writer (errors: the test fails). No C++ object in this frame crosses setjmp.
bool write_png_into(const PngSpec& spec, Bytes* out) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, append_png_bytes, nullptr);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) png_set_PLTE(png, info, spec.palette.data(), int(spec.palette.size()));
  if (!spec.trns.empty()) png_set_tRNS(png, info, spec.trns.data(), int(spec.trns.size()), nullptr);
  png_write_info(png, info);
  const size_t row_bytes = spec.rows.size() / spec.height;
  png_bytep rows[256];
  for (int y = 0; y < spec.height; ++y) rows[y] = const_cast<png_bytep>(spec.rows.data() + y * row_bytes);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

Bytes write_png(const PngSpec& spec) {
  Bytes out;
  EXPECT_TRUE(write_png_into(spec, &out));
  return out;
}

int append_gif_bytes(GifFileType* gif, const GifByteType* data, int n) {
  auto* out = static_cast<Bytes*>(gif->UserData);
  out->insert(out->end(), data, data + n);
  return n;
}

struct GifFrame {
  int left = 0, top = 0, width = 0, height = 0;
  bool interlaced = false;
  int transparent = -1;
  std::vector<uint8_t> indices;  // [height][width], raster order
};

Bytes write_gif(int screen_w, int screen_h, const std::vector<GifColorType>& colors, const std::vector<GifFrame>& frames) {
  Bytes out;
  int error = 0;
  GifFileType* gif = EGifOpen(&out, append_gif_bytes, &error);
  EXPECT_NE(gif, nullptr);
  EGifSetGifVersion(gif, true);
  ColorMapObject* map = GifMakeMapObject(int(colors.size()), colors.data());
  EXPECT_EQ(EGifPutScreenDesc(gif, screen_w, screen_h, 8, 0, map), GIF_OK);
  for (const GifFrame& f : frames) {
    GraphicsControlBlock gcb{};
    gcb.DisposalMode = DISPOSAL_UNSPECIFIED;
    gcb.DelayTime = 10;
    gcb.TransparentColor = f.transparent >= 0 ? f.transparent : NO_TRANSPARENT_COLOR;
    GifByteType ext[4];
    EGifGCBToExtension(&gcb, ext);
    EXPECT_EQ(EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, 4, ext), GIF_OK);
    EXPECT_EQ(EGifPutImageDesc(gif, f.left, f.top, f.width, f.height, f.interlaced, nullptr), GIF_OK);
    std::vector<int> order;
    if (f.interlaced) {
      static constexpr int kStart[4] = {0, 4, 2, 1}, kStep[4] = {8, 8, 4, 2};
      for (int pass = 0; pass < 4; ++pass)
        for (int y = kStart[pass]; y < f.height; y += kStep[pass]) order.push_back(y);
    } else {
      for (int y = 0; y < f.height; ++y) order.push_back(y);
    }
    for (int y : order)
      EXPECT_EQ(EGifPutLine(gif, const_cast<GifByteType*>(f.indices.data() + size_t(y) * f.width), f.width), GIF_OK);
  }
  EXPECT_EQ(EGifCloseFile(gif, &error), GIF_OK);
  GifFreeMapObject(map);
  return out;
}

Bytes webp_lossless(const Image& image) {
  uint8_t* data = nullptr;
  const size_t size = WebPEncodeLosslessRGB(image.pixels.data(), image.width, image.height, image.width * 3, &data);
  Bytes out(data, data + size);
  WebPFree(data);
  return out;
}

void put_le(Bytes& out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(uint8_t(v >> (8 * i)));
}

void put_chunk(Bytes& out, const char* fourcc, const Bytes& payload) {
  out.insert(out.end(), fourcc, fourcc + 4);
  put_le(out, uint32_t(payload.size()), 4);
  out.insert(out.end(), payload.begin(), payload.end());
  if (payload.size() % 2) out.push_back(0);
}

// An animated WebP (VP8X + ANIM + one ANMF per frame), written by hand: libwebpmux, which
// has the encoder, is not a dependency.
Bytes webp_animation(const std::vector<Image>& frames) {
  const int w = frames[0].width, h = frames[0].height;
  Bytes body = {'W', 'E', 'B', 'P'};
  Bytes vp8x = {0x02, 0, 0, 0};  // animation flag
  put_le(vp8x, w - 1, 3);
  put_le(vp8x, h - 1, 3);
  put_chunk(body, "VP8X", vp8x);
  Bytes anim;
  put_le(anim, 0xffffffff, 4);  // background
  put_le(anim, 0, 2);           // loop forever
  put_chunk(body, "ANIM", anim);
  for (const Image& frame : frames) {
    const Bytes file = webp_lossless(frame);  // RIFF/WEBP/VP8L: keep the VP8L chunk
    Bytes anmf;
    put_le(anmf, 0, 3);
    put_le(anmf, 0, 3);
    put_le(anmf, frame.width - 1, 3);
    put_le(anmf, frame.height - 1, 3);
    put_le(anmf, 100, 3);  // duration
    anmf.push_back(0x02);  // no blending
    anmf.insert(anmf.end(), file.begin() + 12, file.end());
    put_chunk(body, "ANMF", anmf);
  }
  Bytes out = {'R', 'I', 'F', 'F'};
  put_le(out, uint32_t(body.size()), 4);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

uint32_t crc32(const uint8_t* data, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

void put_be32(uint8_t* p, uint32_t v) { p[0] = uint8_t(v >> 24), p[1] = uint8_t(v >> 16), p[2] = uint8_t(v >> 8), p[3] = uint8_t(v); }

// ---- tests ---------------------------------------------------------------------------------

TEST(ImageDecode, MatchesPilOnFilesPilWrote) {
  auto dir = test::generate_reference("image_processors.py", "image_codec_cases", "--cases codecs");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto file = formats::SafetensorsFile::open(*dir + "/cases.safetensors");
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  const auto cases = nlohmann::json::parse((*file)->metadata().at("codec_cases"));
  ASSERT_EQ(cases.size(), 22u);  // incl. JPEGs with EXIF orientations 2..8, turned upright
  for (const auto& c : cases) {
    const std::string name = c;
    SCOPED_TRACE(name);
    const Tensor bytes = *(*file)->get("codec." + name + ".file");
    const Image expected = image_from(*(*file)->get("codec." + name + ".rgb"));
    const uint8_t* p = bytes.data<uint8_t>();
    const Image got = decoded(Bytes(p, p + bytes.numel()));
    ASSERT_EQ(got.width, expected.width);
    ASSERT_EQ(got.height, expected.height);
    int differing = 0;
    for (size_t i = 0; i < got.pixels.size(); ++i) differing += got.pixels[i] != expected.pixels[i];
    EXPECT_EQ(differing, 0) << "values differ from PIL's convert(\"RGB\")";
  }
}

TEST(ImageDecode, SniffsEveryFormat) {
  const Image image = noise_image(9, 7, 1);
  EXPECT_EQ(*sniff_image_format(encode_png(image)), ImageFormat::png);
  EXPECT_EQ(*sniff_image_format(encode_jpeg(image)), ImageFormat::jpeg);
  EXPECT_EQ(*sniff_image_format(webp_lossless(image)), ImageFormat::webp);
  EXPECT_EQ(*sniff_image_format(write_gif(2, 1, {{0, 0, 0}, {255, 255, 255}}, {{0, 0, 2, 1, false, -1, {0, 1}}})),
            ImageFormat::gif);
  EXPECT_EQ(image_format_name(ImageFormat::webp), "WebP");
}

TEST(ImageDecode, PngRoundTripIsExact) {
  const Image image = noise_image(123, 45, 2);
  const Image back = decoded(encode_png(image));
  EXPECT_EQ(back.width, 123);
  EXPECT_EQ(back.height, 45);
  EXPECT_EQ(back.pixels, image.pixels);
}

TEST(ImageDecode, JpegRoundTripIsClose) {
  Image image = noise_image(64, 48, 3);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t((i / 3) % 64 * 3 + i % 3 * 20);  // smooth
  const Image back = decoded(encode_jpeg(image, 95));
  ASSERT_EQ(back.width, 64);
  ASSERT_EQ(back.height, 48);
  double error = 0;
  for (size_t i = 0; i < image.pixels.size(); ++i) error += std::abs(int(image.pixels[i]) - int(back.pixels[i]));
  EXPECT_LT(error / double(image.pixels.size()), 3.0);  // q95 on a smooth image: a level or two
}

TEST(ImageDecode, PngGrayPaletteAlphaSixteenBitAndInterlaced) {
  const int w = 5, h = 3;
  {  // 8-bit gray: replicated
    PngSpec s = png_spec(w, h, PNG_COLOR_TYPE_GRAY, 8);
    for (int i = 0; i < w * h; ++i) s.rows.push_back(uint8_t(i * 17));
    const Image image = decoded(write_png(s));
    for (int i = 0; i < w * h; ++i)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(image.pixels[i * 3 + c], uint8_t(i * 17));
  }
  {  // 2-bit gray: scaled to 0, 85, 170, 255
    PngSpec s = png_spec(4, 1, PNG_COLOR_TYPE_GRAY, 2);
    s.rows = {0b00011011};
    const Image image = decoded(write_png(s));
    EXPECT_EQ(image.pixels, (std::vector<uint8_t>{0, 0, 0, 85, 85, 85, 170, 170, 170, 255, 255, 255}));
  }
  {  // gray + alpha: alpha dropped, gray kept under it
    PngSpec s = png_spec(2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8);
    s.rows = {40, 0, 200, 128};
    EXPECT_EQ(decoded(write_png(s)).pixels, (std::vector<uint8_t>{40, 40, 40, 200, 200, 200}));
  }
  {  // palette with transparency: the palette colour, as PIL's convert("RGB")
    PngSpec s = png_spec(3, 1, PNG_COLOR_TYPE_PALETTE, 8);
    s.palette = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}};
    s.trns = {0, 255, 128};
    s.rows = {2, 0, 1};
    EXPECT_EQ(decoded(write_png(s)).pixels, (std::vector<uint8_t>{70, 80, 90, 10, 20, 30, 40, 50, 60}));
  }
  {  // RGBA: the colour under a fully transparent pixel survives
    PngSpec s = png_spec(2, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8);
    s.rows = {1, 2, 3, 0, 250, 251, 252, 255};
    EXPECT_EQ(decoded(write_png(s)).pixels, (std::vector<uint8_t>{1, 2, 3, 250, 251, 252}));
  }
  {  // 16-bit RGB: the high byte
    PngSpec s = png_spec(1, 1, PNG_COLOR_TYPE_RGB, 16);
    s.rows = {0x12, 0xff, 0xab, 0x01, 0x00, 0x80};
    EXPECT_EQ(decoded(write_png(s)).pixels, (std::vector<uint8_t>{0x12, 0xab, 0x00}));
  }
  {  // Adam7 interlaced RGB: the same pixels as written
    const Image image = noise_image(13, 11, 4);
    PngSpec s = png_spec(13, 11, PNG_COLOR_TYPE_RGB, 8, true);
    s.rows = image.pixels;
    EXPECT_EQ(decoded(write_png(s)).pixels, image.pixels);
  }
}

TEST(ImageDecode, WebpLossyLosslessAndAlpha) {
  const Image image = noise_image(40, 30, 5);
  EXPECT_EQ(decoded(webp_lossless(image)).pixels, image.pixels);

  uint8_t* lossy = nullptr;
  const size_t n = WebPEncodeRGB(image.pixels.data(), 40, 30, 120, 90, &lossy);
  const Image back = decoded(Bytes(lossy, lossy + n));
  WebPFree(lossy);
  ASSERT_EQ(back.width, 40);
  ASSERT_EQ(back.height, 30);
  double error = 0;
  for (size_t i = 0; i < image.pixels.size(); ++i) error += std::abs(int(image.pixels[i]) - int(back.pixels[i]));
  EXPECT_LT(error / double(image.pixels.size()), 16.0);

  // Lossless RGBA: colour kept under alpha (exact=1 keeps transparent pixels' RGB).
  std::vector<uint8_t> rgba = {9, 8, 7, 0, 100, 110, 120, 255, 1, 2, 3, 77, 4, 5, 6, 200};
  WebPConfig config;
  ASSERT_TRUE(WebPConfigInit(&config));
  config.lossless = 1;
  config.exact = 1;
  WebPPicture picture;
  ASSERT_TRUE(WebPPictureInit(&picture));
  picture.use_argb = 1;
  picture.width = 2;
  picture.height = 2;
  ASSERT_TRUE(WebPPictureImportRGBA(&picture, rgba.data(), 8));
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  ASSERT_TRUE(WebPEncode(&config, &picture));
  const Image alpha = decoded(Bytes(writer.mem, writer.mem + writer.size));
  WebPPictureFree(&picture);
  WebPMemoryWriterClear(&writer);
  EXPECT_EQ(alpha.pixels, (std::vector<uint8_t>{9, 8, 7, 100, 110, 120, 1, 2, 3, 4, 5, 6}));
}

TEST(ImageDecode, WebpAnimationGivesTheFirstFrame) {
  const Image first = noise_image(12, 10, 6), second = noise_image(12, 10, 7);
  const Bytes file = webp_animation({first, second});
  const Image image = decoded(file);
  ASSERT_EQ(image.width, 12);
  ASSERT_EQ(image.height, 10);
  EXPECT_EQ(image.pixels, first.pixels);
}

TEST(ImageDecode, GifFirstFramePaletteTransparencyAndInterlace) {
  const std::vector<GifColorType> colors = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {10, 20, 30}};
  GifFrame first{0, 0, 4, 9, /*interlaced=*/true, /*transparent=*/3, {}};
  for (int i = 0; i < 36; ++i) first.indices.push_back(uint8_t(i % 4));
  GifFrame second{0, 0, 4, 9, false, -1, std::vector<uint8_t>(36, 2)};
  const Image image = decoded(write_gif(4, 9, colors, {first, second}));
  ASSERT_EQ(image.width, 4);
  ASSERT_EQ(image.height, 9);
  for (int i = 0; i < 36; ++i) {
    const GifColorType& c = colors[i % 4];  // index 3 is transparent: its colour stays
    ASSERT_EQ(image.pixels[i * 3 + 0], c.Red) << i;
    ASSERT_EQ(image.pixels[i * 3 + 1], c.Green) << i;
    ASSERT_EQ(image.pixels[i * 3 + 2], c.Blue) << i;
  }
  // A frame smaller than the screen: the rest is the transparent index's colour.
  GifFrame small{1, 1, 1, 1, false, 3, {1}};
  const Image framed = decoded(write_gif(3, 2, colors, {small}));
  EXPECT_EQ(framed.pixels, (std::vector<uint8_t>{10, 20, 30, 10, 20, 30, 10, 20, 30,  //
                                                 10, 20, 30, 255, 0, 0, 10, 20, 30}));
}

TEST(ImageDecode, BombHeadersAreRefusedBeforeDecoding) {
  const Image tiny = noise_image(4, 4, 8);
  {  // PNG declaring 100000 x 100000 (IHDR patched, CRC recomputed)
    Bytes png = encode_png(tiny);
    put_be32(&png[16], 100000);
    put_be32(&png[20], 100000);
    put_be32(&png[29], crc32(&png[12], 17));
    const std::string e = error_of(png);
    EXPECT_TRUE(contains(e, "100000x100000")) << e;
    EXPECT_TRUE(contains(e, "more than the limit")) << e;
  }
  {  // JPEG whose frame header says 60000 x 60000
    Bytes jpeg = encode_jpeg(tiny);
    size_t sof = 2;
    while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xff && jpeg[sof + 1] == 0xc0)) ++sof;
    ASSERT_LT(sof + 9, jpeg.size());
    jpeg[sof + 5] = 0xea, jpeg[sof + 6] = 0x60;  // height 60000
    jpeg[sof + 7] = 0xea, jpeg[sof + 8] = 0x60;  // width 60000
    EXPECT_TRUE(contains(error_of(jpeg), "60000x60000"));
  }
  {  // GIF screen 65535 x 65535
    Bytes gif = write_gif(4, 4, {{0, 0, 0}, {1, 1, 1}}, {{0, 0, 4, 4, false, -1, std::vector<uint8_t>(16, 1)}});
    gif[6] = gif[7] = gif[8] = gif[9] = 0xff;
    EXPECT_TRUE(contains(error_of(gif), "65535x65535"));
  }
  {  // WebP (lossless) declaring 16384 x 16384
    Bytes webp = webp_lossless(tiny);
    ASSERT_EQ(std::memcmp(&webp[12], "VP8L", 4), 0);
    const uint32_t dims = (16383u) | (16383u << 14);  // width-1, height-1
    webp[21] = uint8_t(dims), webp[22] = uint8_t(dims >> 8), webp[23] = uint8_t(dims >> 16);
    webp[24] = uint8_t((webp[24] & 0xf0) | ((dims >> 24) & 0x0f));
    EXPECT_TRUE(contains(error_of(webp), "16384x16384"));
  }
  {  // a deployment's own tighter limits
    ImageLimits limits;
    limits.max_pixels = 100;
    EXPECT_TRUE(contains(error_of(encode_png(noise_image(20, 10, 9)), limits), "more than the limit of 100 pixels"));
    limits = {};
    limits.max_side = 15;
    EXPECT_TRUE(contains(error_of(encode_png(noise_image(20, 10, 9)), limits), "on a side"));
    limits = {};
    limits.max_bytes = 10;
    EXPECT_TRUE(contains(error_of(encode_png(tiny), limits), "bytes, more than the limit of 10 bytes"));
  }
}

std::vector<std::pair<std::string, Bytes>> sample_files() {
  const Image image = noise_image(24, 16, 10);
  std::vector<uint8_t> indices(24 * 16);
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = uint8_t(i % 4);
  return {
      {"png", encode_png(image)},
      {"jpeg", encode_jpeg(image, 90)},
      {"webp", webp_lossless(image)},
      {"webp animation", webp_animation({image, noise_image(24, 16, 11)})},
      {"gif", write_gif(24, 16, {{0, 0, 0}, {9, 9, 9}, {99, 99, 99}, {255, 255, 255}}, {{0, 0, 24, 16, true, -1, indices}})},
  };
}

TEST(ImageDecode, TruncatedFilesAreRefused) {
  for (const auto& [name, file] : sample_files()) {
    SCOPED_TRACE(name);
    for (size_t keep : {size_t(3), size_t(16), file.size() / 3, file.size() / 2, file.size() - 24}) {
      if (keep >= file.size()) continue;
      const Bytes cut(file.begin(), file.begin() + keep);
      auto image = decode_image(cut);
      EXPECT_FALSE(image.has_value()) << "kept " << keep << " of " << file.size() << " bytes";
      if (!image.has_value()) {
        EXPECT_EQ(image.status().code(), StatusCode::invalid_argument);
      }
    }
  }
}

TEST(ImageDecode, BitFlippedFilesNeverCrash) {
  std::mt19937 rng(12);
  for (const auto& [name, file] : sample_files()) {
    SCOPED_TRACE(name);
    int refused = 0;
    for (int trial = 0; trial < 300; ++trial) {
      Bytes bad = file;
      for (int flips = 1 + int(rng() % 3); flips > 0; --flips) bad[rng() % bad.size()] ^= uint8_t(1u << (rng() % 8));
      auto image = decode_image(bad);
      if (image.has_value()) {
        ASSERT_EQ(image->pixels.size(), size_t(image->num_pixels()) * 3);
      } else {
        ASSERT_EQ(image.status().code(), StatusCode::invalid_argument) << image.status().to_string();
        ++refused;
      }
    }
    EXPECT_GT(refused, 0);  // some damage must be noticed
  }
}

TEST(ImageDecode, ExifOrientationParsing) {
  // Big-endian TIFF, IFD0 with one entry: Orientation (0x0112), SHORT, count 1, value 6.
  const Bytes mm = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
                    0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(exif_orientation(mm), 6);
  Bytes broken = mm;
  broken[13] = 200;  // IFD0 past the end
  EXPECT_EQ(exif_orientation(broken), 1);
  EXPECT_EQ(exif_orientation(Bytes(mm.begin(), mm.begin() + 20)), 1);  // entry cut short
  const std::string xmp = "http://ns.adobe.com/xap/1.0/";
  EXPECT_EQ(exif_orientation(Bytes(xmp.begin(), xmp.end())), 1);
  Bytes nine = mm;
  nine[25] = 9;  // not an orientation
  EXPECT_EQ(exif_orientation(nine), 1);

  Image image;  // 3 x 2, pixel value = its index
  image.width = 3;
  image.height = 2;
  for (int i = 0; i < 6; ++i) image.pixels.insert(image.pixels.end(), 3, uint8_t(i));
  const Image turned = apply_exif_orientation(image, 6);  // 90 degrees clockwise
  ASSERT_EQ(turned.width, 2);
  ASSERT_EQ(turned.height, 3);
  std::vector<uint8_t> firsts;
  for (size_t i = 0; i < turned.pixels.size(); i += 3) firsts.push_back(turned.pixels[i]);
  EXPECT_EQ(firsts, (std::vector<uint8_t>{3, 0, 4, 1, 5, 2}));
}

TEST(ImageDecode, NonImagesSayWhatTheyAre) {
  EXPECT_TRUE(contains(error_of(Bytes{}), "empty"));
  const std::string text = "hello, this is not an image";
  EXPECT_TRUE(contains(error_of(Bytes(text.begin(), text.end())), "is not a PNG, JPEG, WebP or GIF image"));
  const Bytes bmp = {'B', 'M', 0x3a, 0, 0, 0, 0, 0, 0, 0, 0x36, 0, 0, 0};
  EXPECT_TRUE(contains(error_of(bmp), "is a BMP file"));
  const std::string pdf = "%PDF-1.7\n";
  EXPECT_TRUE(contains(error_of(Bytes(pdf.begin(), pdf.end())), "PDF"));
  const Bytes only_magic = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_TRUE(contains(error_of(only_magic), "corrupt PNG"));
}

}  // namespace
}  // namespace prism::media

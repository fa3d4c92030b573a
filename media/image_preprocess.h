// media/image_preprocess.h: what a Hugging Face image processor does to an image before the
// vision tower, read from the model's preprocessor_config.json and done the same way:
// convert to RGB, resize with PIL's filters (antialiased when shrinking, as PIL's resize
// is), centre-crop or pad, rescale, normalise, and (Idefics3 / SmolVLM) split into tiles
// plus a global view. Output is CHW float views ready for models::MediaEncoder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "media/image.h"

namespace prism::media {

// PIL's resampling filters, by the numbers HF configs store in "resample".
enum class Resample : uint8_t { nearest = 0, lanczos = 1, bilinear = 2, bicubic = 3, box = 4, hamming = 5 };

// PIL.Image.resize(size, resample) on an RGB8 image: separable, antialiased (the filter's
// support scales with the shrink factor), rounded to 8 bits after each pass as PIL does.
Image resize(const Image& image, int width, int height, Resample filter);

// The processor families Prism knows, by preprocessor_config.json's "image_processor_type".
enum class ProcessorKind : uint8_t {
  clip,      // CLIPImageProcessor (llava-1.5, CLIP): resize shortest edge, centre crop
  siglip,    // SiglipImageProcessor: resize to exactly size.height x size.width
  idefics3,  // Idefics3ImageProcessor (SmolVLM): longest edge resize, tiles + global view
};

struct ImageProcessorConfig {
  ProcessorKind kind = ProcessorKind::clip;
  Resample resample = Resample::bicubic;
  bool do_resize = true;
  int shortest_edge = 0;       // clip: size.shortest_edge
  int height = 0, width = 0;   // siglip: size.height / width; clip: crop_size
  int longest_edge = 0;        // idefics3: size.longest_edge (the whole image before splitting)
  int tile_size = 0;           // idefics3: max_image_size.longest_edge (one tile's side, = the tower's)
  bool do_center_crop = false;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  float image_mean[3] = {0.5f, 0.5f, 0.5f};
  float image_std[3] = {0.5f, 0.5f, 0.5f};
  bool do_image_splitting = false;  // idefics3
  bool do_pad = false;              // idefics3: pad views to the batch's largest (unused for square tiles)

  // Reads <model_dir>/preprocessor_config.json; invalid_argument naming an unknown
  // image_processor_type or a missing key.
  static Result<ImageProcessorConfig> load(const std::string& model_dir);
  static Result<ImageProcessorConfig> from_json(const nlohmann::json& json);
};

// The budget a request or deployment sets on one image (the visual-token knobs that act
// before the encoder; spatial pooling acts after it, in the engine).
struct ImageBudget {
  int max_side = 0;    // 0: the processor's; else caps the longest edge before tiling (idefics3)
  int max_tiles = -1;  // -1: no cap; 0: no splitting (global view only); else at most this many tiles
};

// An image ready for the tower: views of [3, side, side] f32 each, back to back, CHW.
// For idefics3 with splitting: rows x cols tiles in raster order, then the global view
// (rows = cols = 0 when not split: the global view only). Other kinds: one view.
struct PixelViews {
  int side = 0;
  int num_views = 0;
  int rows = 0, cols = 0;
  std::vector<float> values;  // [num_views, 3, side, side]
};

// The processor's transform of one image under `budget`, as the HF processor computes
// pixel_values for it.
PixelViews preprocess_image(const Image& image, const ImageProcessorConfig& config, const ImageBudget& budget = {});

// A video frame: no splitting, the global view only (resized as the processor's global view;
// for clip/siglip the same as an image).
PixelViews preprocess_frame(const Image& frame, const ImageProcessorConfig& config);

}  // namespace prism::media

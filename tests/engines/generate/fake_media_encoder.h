// What the engines' media tests share: a fake models::MediaEncoder whose rows are a known
// function of each view's pixels (so a wrong view, batch cut or copy changes them), a log of
// its calls, pixel views made from a seed, and a writer of small LLaVA-layout model
// directories that GenerateFrontend loads with a VisionProcessor (config.json, a CLIP
// preprocessor_config.json, and the GPT-2 tokenizer with "<image>" added as token 50257).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_decoder.h"
#include "media/image_preprocess.h"
#include "models/media_encoder.h"
#include "test_util/paths.h"

namespace prism::test {

inline constexpr int32_t kFakeImageToken = 50257;        // "<image>", added after GPT-2's vocabulary
inline constexpr int64_t kFakeVlmVocab = kFakeVocab + 1;  // the decoder's vocabulary with it

// Row `row`, column `col` of a view's encoder output: the view's pixel mean times a
// row-dependent factor, plus one of its pixels.
inline float fake_media_value(std::span<const float> view, int64_t row, int64_t col, int64_t hidden) {
  double sum = 0;
  for (float x : view) sum += x;
  const float mean = float(sum / double(view.size()));
  const int64_t i = row * hidden + col;
  return mean * float(1 + i % 7) + view[size_t(i) % view.size()];
}

// What the fake encoded, shared with the test thread.
struct MediaEncodeLog {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> views{0};
  std::mutex mu;
  std::vector<int64_t> call_views;  // views of each call, in order
};

class FakeMediaEncoder final : public models::MediaEncoder {
 public:
  struct Options {
    int64_t image_size = 4;
    int64_t grid_side = 4;
    int64_t hidden = 8;  // FakeDecoder's hidden size
    std::shared_ptr<MediaEncodeLog> log;
    bool fail = false;  // encode throws (warm-up included)
  };
  explicit FakeMediaEncoder(Options o) : o_(std::move(o)) {}

  Tensor encode(const Tensor& pixels) const override {
    if (o_.fail) throw std::runtime_error("fake media encoder: broken");
    if (pixels.dim() != 4 || pixels.size(1) != 3 || pixels.size(2) != o_.image_size || pixels.size(3) != o_.image_size)
      throw std::runtime_error("fake media encoder: bad pixels " + pixels.to_string());
    const int64_t V = pixels.size(0), per_view = 3 * o_.image_size * o_.image_size, rows = o_.grid_side * o_.grid_side;
    Tensor out = Tensor::empty({V * rows, o_.hidden}, DType::f32);
    const Tensor in = pixels.contiguous();
    for (int64_t v = 0; v < V; ++v) {
      const std::span<const float> view(in.data<float>() + v * per_view, size_t(per_view));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < o_.hidden; ++c)
          out.data<float>()[(v * rows + r) * o_.hidden + c] = fake_media_value(view, r, c, o_.hidden);
    }
    if (o_.log) {
      ++o_.log->calls;
      o_.log->views += V;
      std::lock_guard lock(o_.log->mu);
      o_.log->call_views.push_back(V);
    }
    return out;
  }
  int64_t image_size() const override { return o_.image_size; }
  int64_t grid_side() const override { return o_.grid_side; }
  int64_t output_size() const override { return o_.hidden; }
  double flops_per_view() const override { return 1000.0; }

 private:
  Options o_;
};

// num_views views of side `side`, pixels drawn from `seed`.
inline std::shared_ptr<media::PixelViews> make_pixel_views(int num_views, uint32_t seed, int side = 4) {
  auto v = std::make_shared<media::PixelViews>();
  v->side = side;
  v->num_views = num_views;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  v->values.resize(size_t(num_views) * 3 * size_t(side) * size_t(side));
  for (float& x : v->values) x = dist(rng);
  return v;
}

// The raw encoder rows of views ([num_views · grid², hidden]), as FakeMediaEncoder gives them.
inline std::vector<float> fake_media_rows(const media::PixelViews& views, int64_t grid_side = 4, int64_t hidden = 8) {
  const int64_t per_view = 3 * int64_t(views.side) * views.side, rows = grid_side * grid_side;
  std::vector<float> out;
  for (int64_t v = 0; v < views.num_views; ++v) {
    const std::span<const float> view(views.values.data() + v * per_view, size_t(per_view));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < hidden; ++c) out.push_back(fake_media_value(view, r, c, hidden));
  }
  return out;
}

// A LLaVA-layout directory (vision tower 4×4 pixels, patch 1: a 4×4 grid, 16 rows a view)
// that GenerateFrontend loads with a VisionProcessor; the decoder and encoder are the fakes.
inline std::string write_fake_vlm_model(const std::string& name, int64_t max_positions = 256) {
  const std::string dir = scratch_dir(name);
  const nlohmann::json text_config = {{"model_type", "llama"},
                                      {"vocab_size", kFakeVlmVocab},
                                      {"max_position_embeddings", max_positions},
                                      {"hidden_size", 8}};
  const nlohmann::json config = {{"architectures", {"LlavaForConditionalGeneration"}},
                                 {"model_type", "llava"},
                                 {"image_token_index", kFakeImageToken},
                                 {"vocab_size", kFakeVlmVocab},
                                 {"max_position_embeddings", max_positions},
                                 {"eos_token_id", 50256},
                                 {"vision_feature_layer", -2},
                                 {"vision_feature_select_strategy", "default"},
                                 {"projector_hidden_act", "gelu"},
                                 {"vision_config",
                                  {{"model_type", "clip_vision_model"}, {"image_size", 4}, {"patch_size", 1}}},
                                 {"text_config", text_config}};
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
  const nlohmann::json preprocessor = {{"image_processor_type", "CLIPImageProcessor"},
                                       {"size", {{"shortest_edge", 4}}},
                                       {"crop_size", {{"height", 4}, {"width", 4}}},
                                       {"do_center_crop", true},
                                       {"resample", 3},
                                       {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
                                       {"image_std", {0.26862954, 0.26130258, 0.27577711}}};
  std::ofstream(dir + "/preprocessor_config.json") << preprocessor.dump(2) << "\n";
  std::ifstream in(testdata_dir() + "/tokenizers/gpt2/tokenizer.json");
  nlohmann::json tokenizer = nlohmann::json::parse(in);
  tokenizer["added_tokens"].push_back({{"id", kFakeImageToken},
                                       {"content", "<image>"},
                                       {"single_word", false},
                                       {"lstrip", false},
                                       {"rstrip", false},
                                       {"normalized", false},
                                       {"special", true}});
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump() << "\n";
  return dir;
}

}  // namespace prism::test

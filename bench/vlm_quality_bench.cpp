// bench/vlm_quality_bench.cpp: the quality figure of every visual-token knob (issue 8, docs/vlm.md
// "Quality figures"): for each knob setting, on a fixed set of images (and video clips), the
// greedy answer and the next-token distributions against the full representation.
//
//   vlm_quality_bench --model DIR [--precision f32|bf16] [--tokens 16] [--question TEXT]
//
// Per setting it prints: visual tokens (mean over the set, and as a fraction of the full
// representation's), token agreement (teacher-forced on the full representation's greedy
// answer: the fraction of positions whose argmax is the same token), exact answers (free-run
// greedy answers identical to the full one), and the mean KL(full || setting) of the
// next-token distributions over those positions. The images are synthetic (gradients, shapes,
// stripes, smooth noise) and generated here: no image data set can be downloaded. Video clips
// are frame sequences generated at 8 fps for 4 s and sampled by the knobs' rule (every 1/fps
// seconds, or num_frames evenly spread), as media::decode_video samples a file.
//
// NOTE: with random weights (every checkpoint this machine has) the figures say how far each
// knob moves the model's outputs, not how answers degrade on a trained model; run it on a real
// checkpoint for those.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engines/encode/media_cache.h"
#include "engines/encode/media_encode.h"
#include "engines/generate/kv_cache.h"
#include "engines/generate/media_rows.h"
#include "frontends/generate_frontend.h"
#include "frontends/vision_processor.h"
#include "media/image.h"
#include "media/video.h"
#include "models/decoder.h"
#include "models/media_encoder.h"
#include "models/vlm/vision_language.h"
#include "runtime/arena.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "serving/config.h"

namespace {

namespace gen = prism::engines::generate;
using prism::Tensor;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "vlm_quality_bench: %s\n", message.c_str());
  std::exit(1);
}

template <class T>
T value_or_die(prism::Result<T> r, const std::string& what) {
  if (!r.has_value()) die(what + ": " + r.status().message());
  return std::move(r).value();
}

// ---- the fixed image set -------------------------------------------------------------------

prism::media::Image make_image(int width, int height, const std::function<void(int, int, uint8_t*)>& pixel) {
  prism::media::Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) pixel(x, y, &image.pixels[(size_t(y) * width + x) * 3]);
  return image;
}

uint8_t clamp8(double v) { return static_cast<uint8_t>(std::clamp(v, 0.0, 255.0)); }

// Smooth noise: a sum of a few random low-frequency waves per channel (seeded).
prism::media::Image smooth_noise(int width, int height, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  struct Wave { double fx, fy, phase, amp; };
  std::vector<Wave> waves[3];
  for (auto& w : waves)
    for (int i = 0; i < 5; ++i) w.push_back({u(rng) * 12 / width, u(rng) * 12 / height, u(rng) * 6.28, 20 + u(rng) * 40});
  return make_image(width, height, [&](int x, int y, uint8_t* p) {
    for (int c = 0; c < 3; ++c) {
      double v = 128;
      for (const Wave& w : waves[c]) v += w.amp * std::sin(6.2832 * (w.fx * x + w.fy * y) + w.phase);
      p[c] = clamp8(v);
    }
  });
}

std::vector<std::pair<std::string, prism::media::Image>> image_set() {
  std::vector<std::pair<std::string, prism::media::Image>> set;
  set.emplace_back("gradient 640x480", make_image(640, 480, [](int x, int y, uint8_t* p) {
                     p[0] = clamp8(x * 255.0 / 639);
                     p[1] = clamp8(y * 255.0 / 479);
                     p[2] = clamp8(255 - x * 255.0 / 639);
                   }));
  set.emplace_back("disks 1024x768", make_image(1024, 768, [](int x, int y, uint8_t* p) {
                     const double d1 = std::hypot(x - 300, y - 380), d2 = std::hypot(x - 720, y - 300);
                     p[0] = d1 < 200 ? 230 : 30;
                     p[1] = d2 < 150 ? 200 : 60;
                     p[2] = (d1 < 200) != (d2 < 150) ? 40 : 180;
                   }));
  set.emplace_back("stripes 300x500", make_image(300, 500, [](int x, int y, uint8_t* p) {
                     const bool on = ((x + y) / 25) % 2 == 0;
                     p[0] = on ? 250 : 10;
                     p[1] = on ? 220 : 40;
                     p[2] = on ? 30 : 200;
                   }));
  set.emplace_back("checkers 800x800", make_image(800, 800, [](int x, int y, uint8_t* p) {
                     const bool on = (x / 100 + y / 100) % 2 == 0;
                     p[0] = p[1] = p[2] = on ? 240 : 20;
                   }));
  set.emplace_back("noise 1600x900", smooth_noise(1600, 900, 1));
  set.emplace_back("noise 512x512", smooth_noise(512, 512, 2));
  return set;
}

// A 4-second clip at 8 fps: a disk moving over smooth noise.
std::vector<prism::media::Image> clip_frames(unsigned seed) {
  const prism::media::Image background = smooth_noise(480, 320, seed);
  std::vector<prism::media::Image> frames;
  for (int f = 0; f < 32; ++f) {
    prism::media::Image frame = background;
    const double cx = 60 + f * 11.0, cy = 160 + 60 * std::sin(f * 0.4);
    for (int y = 0; y < frame.height; ++y)
      for (int x = 0; x < frame.width; ++x)
        if (std::hypot(x - cx, y - cy) < 40) {
          uint8_t* p = &frame.pixels[(size_t(y) * frame.width + x) * 3];
          p[0] = 250, p[1] = 40, p[2] = 40;
        }
    frames.push_back(std::move(frame));
  }
  return frames;
}

// The frames media::decode_video would keep from an 8 fps, 4 s clip under `s`.
prism::media::VideoFrames sample_clip(const std::vector<prism::media::Image>& all, const prism::media::VideoSampling& s) {
  const int total = static_cast<int>(all.size());
  const double fps = 8.0, duration = total / fps;
  std::vector<int> picks;
  if (s.num_frames > 0) {
    const int n = std::min({s.num_frames, s.max_frames, total});
    for (int i = 0; i < n; ++i) picks.push_back(n == 1 ? 0 : static_cast<int>(std::lround(i * (total - 1.0) / (n - 1))));
  } else {
    int n = static_cast<int>(std::ceil(duration * s.fps - 1e-9));
    if (n > s.max_frames) {
      n = s.max_frames;
      for (int i = 0; i < n; ++i) picks.push_back(n == 1 ? 0 : static_cast<int>(std::lround(i * (total - 1.0) / (n - 1))));
    } else {
      for (int i = 0; i < n; ++i) picks.push_back(std::min(total - 1, static_cast<int>(std::lround(i / s.fps * fps))));
    }
  }
  prism::media::VideoFrames v;
  v.duration = duration;
  v.native_fps = fps;
  v.width = all[0].width;
  v.height = all[0].height;
  for (int i : picks) {
    v.frames.push_back(all[size_t(i)]);
    v.timestamps.push_back(i / fps);
  }
  return v;
}

// ---- one prompt through the model ----------------------------------------------------------

// A single sequence against a private paged KV cache; rows where the prompt holds the image
// token come from `rows`.
class Sequence {
 public:
  Sequence(prism::models::Decoder& lm, int max_len, prism::DType kv_dtype)
      : lm_(lm), blocks_((max_len + kBlock - 1) / kBlock), kv_(lm.kv_spec(), blocks_, kBlock, kv_dtype) {}

  // Appends tokens (with their media rows: row_of[i] >= 0 takes rows[row_of[i]]) and returns
  // the last token's next-token logits.
  std::vector<float> step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& row_of, const Tensor& rows) {
    const auto t = static_cast<int64_t>(tokens.size());
    std::vector<int32_t> ids(tokens), pos, slots;
    std::vector<int32_t> table(static_cast<size_t>(blocks_));
    for (int b = 0; b < blocks_; ++b) table[size_t(b)] = b;
    bool any_rows = false;
    for (int64_t i = 0; i < t; ++i) {
      const int p = cached_ + static_cast<int>(i);
      pos.push_back(p);
      slots.push_back(p);
      if (!row_of.empty() && row_of[size_t(i)] >= 0) ids[size_t(i)] = -1, any_rows = true;
    }
    cached_ += static_cast<int>(t);
    prism::models::DecoderBatch b;
    b.token_ids = Tensor::from<int32_t>(ids, {t});
    b.positions = Tensor::from<int32_t>(pos, {t});
    b.slot_mapping = Tensor::from<int32_t>(slots, {t});
    b.cu_seqlens_q = Tensor::from<int32_t>({0, static_cast<int32_t>(t)}, {2});
    b.block_tables = Tensor::from<int32_t>(table, {1, blocks_});
    b.context_lens = Tensor::from<int32_t>({cached_}, {1});
    b.logits_rows = Tensor::from<int32_t>({static_cast<int32_t>(t - 1)}, {1});
    if (any_rows) {
      const int64_t h = lm_.hidden_size();
      b.input_embeddings = Tensor::zeros({t, h}, prism::DType::f32);
      for (int64_t i = 0; i < t; ++i)
        if (row_of[size_t(i)] >= 0)
          std::copy_n(rows.data<float>() + row_of[size_t(i)] * h, h, b.input_embeddings.data<float>() + i * h);
    }
    arena_.reset();
    std::vector<float> logits;
    {
      prism::ArenaScope scope(&arena_);
      const Tensor out = lm_.forward(b, kv_.layers());
      logits.assign(out.data<float>(), out.data<float>() + out.numel());
    }
    return logits;
  }

 private:
  static constexpr int kBlock = 16;
  prism::models::Decoder& lm_;
  int blocks_;
  gen::KvCache kv_;
  int cached_ = 0;
  prism::Arena arena_;
};

std::vector<double> log_softmax(const std::vector<float>& logits) {
  const double m = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(l - m);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - m - std::log(z);
  return out;
}

int32_t argmax(const std::vector<float>& v) { return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

struct Answer {
  std::vector<int32_t> tokens;  // free-run greedy
  // Log-probs at each answer position: teacher-forced on the tokens run() was given, else
  // along the free run's own tokens (the same thing for the full representation).
  std::vector<std::vector<double>> forced;
  int64_t visual_tokens = 0;
};

class Runner {
 public:
  Runner(const std::string& dir, prism::ops::Precision precision, int tokens, std::string question)
      : tokens_(tokens), question_(std::move(question)) {
    prism::serving::DeploymentConfig config;
    config.name = "quality";
    config.task = "chat";
    config.model = dir;
    frontend_ = value_or_die(prism::frontends::GenerateFrontend::load(config), "frontend");
    if (frontend_->vision() == nullptr) die(dir + " is not a vision-language model");
    lm_ = value_or_die(prism::models::load_vlm_language_model(dir, precision), "language model");
    encoder_ = value_or_die(prism::models::load_vlm_media_encoder(dir, precision), "media encoder");
    kv_dtype_ = precision == prism::ops::Precision::f32 ? prism::DType::f32 : prism::DType::bf16;
  }

  const prism::frontends::VisionProcessor& processor() const { return *frontend_->vision(); }

  // The answer to the question about `media`, with the log-probs along `forced` (null: along
  // the answer itself).
  Answer run(const prism::frontends::PreparedMedia& media, const std::vector<int32_t>* forced) {
    prism::text::ChatRequest chat;
    chat.add_generation_prompt = true;
    nlohmann::ordered_json content = nlohmann::ordered_json::array();
    content.push_back({{"type", "image"}});
    content.push_back({{"type", "text"}, {"text", question_}});
    chat.messages.push_back({{"role", "user"}, {"content", content}});
    const std::vector<prism::frontends::PreparedMedia> items = {media};
    const std::vector<int32_t> prompt = value_or_die(frontend_->chat_prompt(chat, items), "prompt");

    const std::vector<prism::frontends::MediaItem> media_items = {media.item};
    const gen::PromptMedia placed =
        value_or_die(gen::place_media(prompt, processor().image_token_id(), media_items), "placing rows");
    const Tensor rows = encode(media.item);

    Answer a;
    a.visual_tokens = media.item.num_rows;
    const int max_len = static_cast<int>(prompt.size()) + tokens_ + 1;
    {
      Sequence s(*lm_, max_len, kv_dtype_);
      std::vector<float> logits = s.step(prompt, placed.row_of, rows);
      for (int i = 0; i < tokens_; ++i) {
        if (forced == nullptr) a.forced.push_back(log_softmax(logits));
        a.tokens.push_back(argmax(logits));
        logits = s.step({a.tokens.back()}, {}, rows);
      }
    }
    if (forced != nullptr) {
      Sequence s(*lm_, max_len, kv_dtype_);
      std::vector<float> logits = s.step(prompt, placed.row_of, rows);
      for (int32_t t : *forced) {
        a.forced.push_back(log_softmax(logits));
        logits = s.step({t}, {}, rows);
      }
    }
    return a;
  }

 private:
  // The item's rows: the encoder over its views, pooled, as the engine gets them.
  Tensor encode(const prism::frontends::MediaItem& item) {
    prism::engines::encode::MediaEncodeRunner runner(*encoder_, 8);
    const prism::media::PixelViews* views[] = {item.views.get()};
    const prism::engines::encode::MediaFeaturesPtr features = value_or_die(runner.encode(views), "encoding").front();
    Tensor rows = Tensor::zeros({item.num_rows, features->cols}, prism::DType::f32);
    const prism::Status s = gen::pool_media_rows(*features, item, encoder_->grid_side(),
                                                 {rows.data<float>(), size_t(rows.numel())});
    if (!s.ok()) die("pooling: " + s.message());
    return rows;
  }

  int tokens_;
  std::string question_;
  std::shared_ptr<const prism::frontends::GenerateFrontend> frontend_;
  std::unique_ptr<prism::models::Decoder> lm_;
  std::unique_ptr<prism::models::MediaEncoder> encoder_;
  prism::DType kv_dtype_ = prism::DType::f32;
};

// ---- settings and figures ------------------------------------------------------------------

struct Figures {
  double visual_tokens = 0, full_visual_tokens = 0;
  int64_t agree = 0, positions = 0, exact = 0, cases = 0;
  double kl = 0;

  void add(const Answer& full, const Answer& s) {
    visual_tokens += double(s.visual_tokens);
    full_visual_tokens += double(full.visual_tokens);
    ++cases;
    exact += s.tokens == full.tokens ? 1 : 0;
    for (size_t i = 0; i < full.tokens.size(); ++i) {
      const std::vector<double>& q = s.forced[i];
      const int32_t best = static_cast<int32_t>(std::max_element(q.begin(), q.end()) - q.begin());
      agree += best == full.tokens[i] ? 1 : 0;
      ++positions;
      const std::vector<double>& p = full.forced[i];
      double kl = 0;
      for (size_t k = 0; k < p.size(); ++k) kl += std::exp(p[k]) * (p[k] - q[k]);
      this->kl += kl;
    }
  }
  void print(const std::string& name) const {
    std::printf("  %-34s %9.1f %7.1f%% %9.1f%% %7lld/%-3lld %11.2e\n", name.c_str(), visual_tokens / cases,
                100.0 * visual_tokens / full_visual_tokens, 100.0 * double(agree) / double(positions),
                static_cast<long long>(exact), static_cast<long long>(cases), kl / double(positions));
  }
};

void print_header(const char* what) {
  std::printf("\n%s\n  %-34s %9s %8s %10s %11s %11s\n", what, "setting", "vis.tok", "of full", "agreement", "exact",
              "mean KL");
}

int usage() {
  std::fprintf(stderr, "usage: vlm_quality_bench --model DIR [--precision f32|bf16] [--tokens N] [--question TEXT]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, precision_name = "f32", question = "Describe this image.";
  int tokens = 16;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--model") model = argv[++i];
    else if (a == "--precision") precision_name = argv[++i];
    else if (a == "--tokens") tokens = std::atoi(argv[++i]);
    else if (a == "--question") question = argv[++i];
    else return usage();
  }
  if (model.empty() || tokens < 1) return usage();
  const prism::ops::Precision precision = value_or_die(prism::ops::parse_precision(precision_name), "--precision");

  Runner runner(model, precision, tokens, question);
  const prism::frontends::VisionProcessor& proc = runner.processor();
  const prism::frontends::VisualBudget base = proc.default_budget();
  std::printf("vlm_quality_bench: %s at %s, %d answer tokens; agreement = teacher-forced argmax on the full "
              "representation's greedy answer; exact = identical free-run answers; KL(full || setting)\n",
              model.c_str(), precision_name.c_str(), tokens);

  // Images: the full representation is the processor's own (no tile cap, no pooling).
  prism::frontends::VisualBudget full = base;
  full.image = {};
  full.spatial_pool = 1;
  std::vector<std::pair<std::string, prism::frontends::VisualBudget>> image_settings;
  const bool tiles = proc.image_config().do_image_splitting;
  if (tiles) {
    for (int t : {4, 1, 0}) {
      prism::frontends::VisualBudget b = full;
      b.image.max_tiles = t;
      image_settings.emplace_back("max_image_tiles = " + std::to_string(t), b);
    }
    prism::frontends::VisualBudget b = full;
    b.image.max_side = proc.image_config().longest_edge / 2;
    image_settings.emplace_back("max_image_side = " + std::to_string(b.image.max_side), b);
  }
  for (int p : {2, 4}) {
    if (proc.grid_side() % p != 0) continue;
    prism::frontends::VisualBudget b = full;
    b.spatial_pool = p;
    image_settings.emplace_back("spatial_pool = " + std::to_string(p), b);
  }
  if (tiles) {
    prism::frontends::VisualBudget b = full;
    b.image.max_tiles = 4;
    b.spatial_pool = 2;
    if (proc.grid_side() % 2 == 0) image_settings.emplace_back("max_image_tiles = 4, spatial_pool = 2", b);
  }

  std::vector<Figures> image_figures(image_settings.size());
  for (const auto& [name, image] : image_set()) {
    const prism::frontends::PreparedMedia ref = value_or_die(proc.prepare_image(image, full), name);
    const Answer full = runner.run(ref, nullptr);
    for (size_t s = 0; s < image_settings.size(); ++s) {
      const prism::frontends::PreparedMedia m = value_or_die(proc.prepare_image(image, image_settings[s].second), name);
      image_figures[s].add(full, runner.run(m, &full.tokens));
    }
  }
  print_header("images (6 synthetic images; full = the processor's own representation)");
  for (size_t s = 0; s < image_settings.size(); ++s) image_figures[s].print(image_settings[s].first);

  // Video: the full representation is 8 frames (2 fps over 4 s), unpooled.
  prism::frontends::VisualBudget vfull = base;
  vfull.video = {};
  vfull.video.fps = 2;
  vfull.video.max_frames = 8;
  vfull.video_spatial_pool = 1;
  vfull.temporal_pool = 1;
  std::vector<std::pair<std::string, prism::frontends::VisualBudget>> video_settings;
  auto video_setting = [&](const std::string& name, const std::function<void(prism::frontends::VisualBudget&)>& edit) {
    prism::frontends::VisualBudget b = vfull;
    edit(b);
    video_settings.emplace_back(name, b);
  };
  video_setting("video_fps = 1", [](prism::frontends::VisualBudget& b) { b.video.fps = 1; });
  video_setting("video_num_frames = 2", [](prism::frontends::VisualBudget& b) { b.video.num_frames = 2; });
  if (proc.grid_side() % 2 == 0)
    video_setting("video_spatial_pool = 2", [](prism::frontends::VisualBudget& b) { b.video_spatial_pool = 2; });
  video_setting("temporal_pool = 2", [](prism::frontends::VisualBudget& b) { b.temporal_pool = 2; });
  video_setting("defaults (" + std::to_string(base.video.fps).substr(0, 3) + " fps, pool " +
                    std::to_string(base.video_spatial_pool) + ", temporal " + std::to_string(base.temporal_pool) + ")",
                [&](prism::frontends::VisualBudget& b) {
                  b.video = base.video;
                  b.video_spatial_pool = base.video_spatial_pool;
                  b.temporal_pool = base.temporal_pool;
                });

  std::vector<Figures> video_figures(video_settings.size());
  for (unsigned clip = 1; clip <= 2; ++clip) {
    const std::vector<prism::media::Image> frames = clip_frames(clip);
    const prism::frontends::PreparedMedia ref = value_or_die(proc.prepare_video(sample_clip(frames, vfull.video), vfull), "clip");
    const Answer full = runner.run(ref, nullptr);
    for (size_t s = 0; s < video_settings.size(); ++s) {
      const prism::frontends::VisualBudget& b = video_settings[s].second;
      const prism::frontends::PreparedMedia m = value_or_die(proc.prepare_video(sample_clip(frames, b.video), b), "clip");
      video_figures[s].add(full, runner.run(m, &full.tokens));
    }
  }
  print_header("video (2 synthetic 4-s clips; full = 8 frames at 2 fps, unpooled)");
  for (size_t s = 0; s < video_settings.size(); ++s) video_figures[s].print(video_settings[s].first);
  return 0;
}

// vlm_bench: the vision-language path's speed against the PyTorch peer on the same weights,
// every figure measured in one run (the machine is shared: its speed drifts minute to minute).
//
//   OMP_WAIT_POLICY=PASSIVE build/bench/vlm_bench --model DIR [--precision bf16] [--modes LIST] ...
//
// DIR is a vision-language checkpoint, e.g. real-size random bf16 weights from
//   /usr/bin/python3 bench/vlm_peer.py write --config smolvlm-256m --out /tmp/smolvlm-256m
// (also smolvlm-500m, llava-clip336-smollm2-360m; tiny and tiny-llava check the bench in a
// minute). docs/vlm-bench.md says how to run it and what each figure means. Modes (default:
// all), in the order they run:
//   image    time to first token against the visual-token count, one fresh image a request:
//            Idefics3 with the longest edge capped at 1, 2 and 3 tiles (--tiles-per-side 1,2,3:
//            the global view alone, 2x2 and 3x3 tiles plus it; SmolVLM: 64, 320 and 640
//            tokens), LLaVA at three spatial pools (--pools 1,2,4: 576, 144 and 36 tokens of
//            its one 336-px view)
//   turn     a second turn about the same image (media cache + prefix cache) against the same
//            prompt cold (a new image), and the image alone from the media cache (another
//            conversation) (target: second turn >= 5x faster than cold)
//   video    time to first token of a 4-s clip (--video-seconds) sampled at --video-fps
//            0.5,1,2 (2, 4 and 8 frames; at most video_max_frames, 16; each frame's grid pooled
//            2 x 2 by the default video_spatial_pool)
//   encoder  the media encoder alone (models/vlm): views/s at --batches 1,2,4,8, as a
//            fraction of the GEMM peak measured in the run
//   peer     bench/vlm_peer.py on the same weights and the same pixels and prompt ids: its
//            encoder + prefill time for every scenario above (its second turn reuses the
//            encoder time of the image step with the same views: it caches nothing), its
//            encoder at each batch size (taken from a step of exactly that many views when
//            there is one: the peer's encoder takes tens of seconds a view here), and the
//            same-weights check (visual rows and next-token logits against Prism's)
// Engine modes go through a serving::Deployment of task "chat" (register_generate_engine) as
// `prism serve` runs it; requests are GenerateInputs with media items prepared by the
// deployment's VisionProcessor (preprocessing, done before the clock starts, is timed apart).
// Images and frames are synthetic (video frames are not decoded: decode_video's cost is not in
// the figures).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "configs/hf_config.h"
#include "engines/generate/generate_engine.h"
#include "formats/safetensors.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "frontends/vision_processor.h"
#include "media/image.h"
#include "media/video.h"
#include "models/decoder.h"
#include "models/media_encoder.h"
#include "models/vlm/vision_language.h"
#include "runtime/gemm_peak.h"
#include "runtime/threads.h"
#include "serving/config.h"
#include "serving/deployment.h"
#include "serving/metrics.h"

namespace {

namespace fs = std::filesystem;
namespace gen = prism::engines::generate;
using prism::DType;
using prism::Tensor;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double seconds_since(Clock::time_point t0) { return seconds_between(t0, Clock::now()); }

struct Options {
  std::string model;
  std::string precision = "bf16";
  std::set<std::string> modes = {"image", "turn", "video", "encoder", "peer"};
  std::vector<int> tiles_per_side = {1, 2, 3};  // Idefics3: longest edge capped at n tiles (1, 2x2, 3x3)
  std::vector<int> pools = {1, 2, 4};                // LLaVA: spatial pools (576, 144, 36 tokens)
  double video_seconds = 4;
  std::vector<double> video_fps = {0.5, 1, 2};
  std::vector<int> batches = {1, 2, 4, 8};
  int encoder_repeats = 1;
  int64_t kv_cache_mib = 512;
  uint32_t seed = 7;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

template <typename T>
std::vector<T> parse_list(const std::string& s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(static_cast<T>(std::atof(item.c_str())));
  return out;
}

// A w x h image: smooth colour fields plus noise, different for every seed (so every request
// has its own content key: no media-cache hit unless meant).
prism::media::Image synthetic_image(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(-24, 24);
  const double fx = 0.01 + 0.02 * (seed % 7), fy = 0.015 + 0.01 * (seed % 5);
  prism::media::Image im{w, h, std::vector<uint8_t>(size_t(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const double v = 128 + 90 * std::sin(fx * x * (c + 1) + fy * y + seed) + noise(rng);
        im.pixels[(size_t(y) * w + x) * 3 + c] = uint8_t(std::clamp(v, 0.0, 255.0));
      }
  return im;
}

// ---- requests ------------------------------------------------------------------------------------

enum class Family { idefics3, llava };

// The family's prompt around its media text (SmolVLM's and llava-1.5's chat formats), written
// out here: the bench checkpoints have no chat template.
std::string prompt_text(Family f, const std::string& preamble, const std::string& media, const std::string& question) {
  if (f == Family::idefics3)
    return "<|im_start|>" + preamble + "User:" + media + question + "<end_of_utterance>\nAssistant:";
  return preamble + "USER: " + media + "\n" + question + " ASSISTANT:";
}

constexpr const char* kQuestion = "What is shown in this picture? Describe it in detail, please.";
constexpr const char* kAnswer = " A field of coloured stripes and noise, brighter towards the top.";
constexpr const char* kFollowUp = "Which colour covers most of it?";

// A scenario: one request's prompt and media, as Prism and the peer both run it.
struct Scenario {
  std::string name, label;  // label: the table's first column
  std::vector<int32_t> prompt;
  std::vector<prism::frontends::MediaItem> media;
  int64_t visual_rows = 0;
  double preprocess_s = 0;  // Prism's preprocessing (not in the TTFT)
  // Prism's figures
  double ttft_s = 0;
  int64_t cached_tokens = 0;
  int64_t encoded_items = 0;
  int32_t first_token = -1;
  bool timed_by_peer = true;
  std::string peer_encoder_like;  // the peer reuses this scenario's encoder time (same views)
};

struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  Clock::time_point submitted, first_chunk;
  bool got_chunk = false, done = false;
  int32_t first_token = -1;
  prism::Status status;
  int64_t cached = 0, encoded = 0;

  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

std::shared_ptr<Stream> submit(prism::serving::Deployment& d, const Scenario& s) {
  auto st = std::make_shared<Stream>();
  auto in = std::make_unique<prism::frontends::GenerateInput>();
  in->prompt = s.prompt;
  in->media = s.media;
  in->sampling.temperature = 0.0f;
  in->sampling.max_tokens = 1;
  in->sampling.ignore_eos = true;
  auto req = prism::serving::make_request(std::move(in), [st](prism::Result<prism::serving::PayloadPtr> r) {
    std::lock_guard lock(st->mu);
    if (r.has_value()) {
      if (const auto* out = dynamic_cast<const prism::frontends::GenerateOutput*>(r->get())) {
        st->cached = out->cached_prompt_tokens;
        st->encoded = out->encoded_media;
        if (!out->choices.empty() && !out->choices[0].tokens.empty() && st->first_token < 0)
          st->first_token = out->choices[0].tokens[0];
      }
    } else {
      st->status = r.status();
    }
    st->done = true;
    st->cv.notify_all();
  });
  req->cost_tokens = std::max<int64_t>(1, static_cast<int64_t>(s.prompt.size()));
  req->on_partial = [st](prism::serving::PayloadPtr p) {
    const auto* chunk = dynamic_cast<const prism::frontends::GenerateChunk*>(p.get());
    if (chunk == nullptr) return;
    std::lock_guard lock(st->mu);
    if (st->got_chunk) return;
    for (const prism::frontends::ChoiceDelta& delta : chunk->deltas)
      if (!delta.tokens.empty()) {
        st->got_chunk = true;
        st->first_chunk = Clock::now();
        st->first_token = delta.tokens[0];
        return;
      }
  };
  st->submitted = Clock::now();
  if (const prism::Status s2 = d.submit(req); !s2.ok()) {
    std::lock_guard lock(st->mu);
    st->status = s2;
    st->done = true;
  }
  return st;
}

// Runs s on the deployment and fills its Prism figures; false (with a message) on failure.
bool run(prism::serving::Deployment& d, Scenario& s) {
  auto st = submit(d, s);
  st->wait();
  if (!st->status.ok()) {
    std::fprintf(stderr, "vlm_bench: %s: %s\n", s.name.c_str(), st->status.to_string().c_str());
    return false;
  }
  s.ttft_s = st->got_chunk ? seconds_between(st->submitted, st->first_chunk) : 0.0;
  s.cached_tokens = st->cached;
  s.encoded_items = st->encoded;
  s.first_token = st->first_token;
  return true;
}

// Builds scenarios from images / videos through the deployment's frontend and processor.
class ScenarioBuilder {
 public:
  ScenarioBuilder(const prism::frontends::GenerateFrontend& fe, Family family) : fe_(fe), vp_(*fe.vision()), family_(family) {}

  const prism::frontends::VisionProcessor& vision() const { return vp_; }

  // One request: preamble, then the media items (images, then videos), then the question.
  // `turns`: earlier (question, answer) pairs about the same media, before the question.
  prism::Result<Scenario> build(std::string name, std::string label, const std::vector<prism::media::Image>& images,
                                const std::vector<prism::media::VideoFrames>& videos, const prism::frontends::VisualBudget& budget,
                                const std::string& preamble = "", bool follow_up = false) const {
    Scenario s;
    s.name = std::move(name);
    s.label = std::move(label);
    std::string media_text;
    const auto t0 = Clock::now();
    for (const auto& im : images) {
      PRISM_ASSIGN_OR_RETURN(prism::frontends::PreparedMedia p, vp_.prepare_image(im, budget));
      media_text += p.prompt_text;
      s.visual_rows += p.item.num_rows;
      s.media.push_back(std::move(p.item));
    }
    for (const auto& v : videos) {
      PRISM_ASSIGN_OR_RETURN(prism::frontends::PreparedMedia p, vp_.prepare_video(v, budget));
      media_text += p.prompt_text;
      s.visual_rows += p.item.num_rows;
      s.media.push_back(std::move(p.item));
    }
    s.preprocess_s = seconds_since(t0);
    std::string text = prompt_text(family_, preamble, media_text, kQuestion);
    if (follow_up) {
      text += kAnswer;
      text += family_ == Family::idefics3 ? std::string("<end_of_utterance>\nUser:") + kFollowUp +
                                                "<end_of_utterance>\nAssistant:"
                                          : std::string("</s>USER: ") + kFollowUp + " ASSISTANT:";
    }
    s.prompt = fe_.tokenizer().encode(text, false).ids;
    const auto image_positions = std::count(s.prompt.begin(), s.prompt.end(), vp_.image_token_id());
    if (image_positions != s.visual_rows)
      return prism::internal_error(s.name + ": " + std::to_string(image_positions) + " image tokens for " +
                                   std::to_string(s.visual_rows) + " rows");
    return s;
  }

 private:
  const prism::frontends::GenerateFrontend& fe_;
  const prism::frontends::VisionProcessor& vp_;
  Family family_;
};

prism::media::VideoFrames synthetic_video(double seconds, double fps, uint32_t seed) {
  prism::media::VideoFrames v;
  const int n = std::max(1, int(std::floor(seconds * fps + 1e-9)));
  v.duration = seconds;
  v.native_fps = 30;
  v.width = 640;
  v.height = 360;
  for (int i = 0; i < n; ++i) {
    v.frames.push_back(synthetic_image(640, 360, seed * 1000 + uint32_t(i)));
    v.timestamps.push_back(i / fps);
  }
  return v;
}

// ---- the model alone: encoder throughput and the same-weights check ---------------------------------

Tensor views_tensor(const prism::media::PixelViews& v) {
  return Tensor::from<float>(v.values, {v.num_views, 3, v.side, v.side});
}

// Next-token logits of a prompt whose image positions take `rows`, through the decoder alone
// (contiguous f32 KV): [vocab].
std::vector<float> prompt_logits(prism::models::Decoder& lm, const std::vector<int32_t>& prompt, int32_t image_token,
                                 const Tensor& rows) {
  const int t = static_cast<int>(prompt.size());
  const prism::models::KvSpec spec = lm.kv_spec();
  constexpr int kBlock = 16;
  const int blocks = (t + kBlock - 1) / kBlock;
  std::vector<prism::models::KvLayer> kv(size_t(spec.num_layers));
  for (auto& layer : kv) {
    layer.k = Tensor::zeros({blocks, kBlock, spec.num_kv_heads, spec.head_dim}, DType::f32);
    layer.v = Tensor::zeros({blocks, kBlock, spec.num_kv_heads, spec.head_dim}, DType::f32);
  }
  const int64_t hidden = lm.hidden_size();
  std::vector<int32_t> ids = prompt;
  std::vector<int32_t> positions(static_cast<size_t>(t)), table(static_cast<size_t>(blocks));
  Tensor embeddings = Tensor::zeros({t, hidden}, DType::f32);
  int64_t next_row = 0;
  for (int i = 0; i < t; ++i) {
    positions[size_t(i)] = i;
    if (ids[size_t(i)] != image_token) continue;
    ids[size_t(i)] = -1;
    std::copy_n(rows.data<float>() + next_row * hidden, hidden, embeddings.data<float>() + int64_t(i) * hidden);
    ++next_row;
  }
  for (int b = 0; b < blocks; ++b) table[size_t(b)] = b;
  prism::models::DecoderBatch batch;
  batch.token_ids = Tensor::from<int32_t>(ids, {t});
  batch.input_embeddings = embeddings;
  batch.positions = Tensor::from<int32_t>(positions, {t});
  batch.slot_mapping = Tensor::from<int32_t>(positions, {t});
  batch.cu_seqlens_q = Tensor::from<int32_t>({0, t}, {2});
  batch.block_tables = Tensor::from<int32_t>(table, {1, blocks});
  batch.context_lens = Tensor::from<int32_t>({t}, {1});
  batch.logits_rows = Tensor::from<int32_t>({t - 1}, {1});
  const Tensor logits = lm.forward(batch, kv);
  return {logits.data<float>(), logits.data<float>() + logits.numel()};
}

// max |a - b| / max |b|.
double rel_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// The rank (0: the top) of `token` in `logits`.
int64_t rank_of(const std::vector<float>& logits, int32_t token) {
  if (token < 0 || size_t(token) >= logits.size()) return -1;
  return std::count_if(logits.begin(), logits.end(), [&](float l) { return l > logits[size_t(token)]; });
}

// ---- the peer ----------------------------------------------------------------------------------

struct PeerFigures {
  bool ok = false;
  std::map<std::string, double> ttft_s, encoder_s, prefill_s;
  std::map<std::string, int32_t> first_token;
  std::map<int, double> views_per_s;
  std::vector<float> check_rows, check_logits;
};

PeerFigures run_peer(const Options& o, const std::vector<const Scenario*>& scenarios, const Tensor& encoder_pixels,
                     const std::string& check_name) {
  const std::string dir = (fs::temp_directory_path() / ("prism_vlm_bench_" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  nlohmann::json plan = {{"scenarios", nlohmann::json::array()},
                         {"encoder_pixels", "encoder.pixels"},
                         {"encoder_batches", o.batches},
                         {"encoder_repeats", o.encoder_repeats}};
  for (const Scenario* s : scenarios) {
    nlohmann::json items = nlohmann::json::array();
    for (size_t k = 0; k < s->media.size(); ++k) {
      const std::string name = s->name + ".pixels." + std::to_string(k);
      tensors.emplace_back(name, views_tensor(*s->media[k].views));
      items.push_back({{"pixels", name}, {"spatial_pool", s->media[k].spatial_pool},
                       {"temporal_pool", s->media[k].temporal_pool}});
    }
    tensors.emplace_back(s->name + ".prompt", Tensor::from<int32_t>(s->prompt, {int64_t(s->prompt.size())}));
    plan["scenarios"].push_back({{"name", s->name},
                                 {"items", items},
                                 {"prompt", s->name + ".prompt"},
                                 {"check", s->name == check_name},
                                 {"encoder_like", s->peer_encoder_like}});
  }
  // NOTE: a scenario of exactly B views (one item, no encoder_like) already timed the peer's
  // encoder at batch B: it gives that figure instead of another run of B views.
  nlohmann::json from = nlohmann::json::object();
  for (int b : o.batches)
    for (const Scenario* s : scenarios)
      if (s->peer_encoder_like.empty() && s->media.size() == 1 && s->media[0].views->num_views == b) {
        from[std::to_string(b)] = s->name;
        break;
      }
  plan["encoder_batches_from"] = from;
  tensors.emplace_back("encoder.pixels", encoder_pixels);
  PeerFigures p;
  if (const prism::Status st = prism::formats::write_safetensors(dir + "/inputs.safetensors", tensors); !st.ok()) {
    std::fprintf(stderr, "vlm_bench: %s\n", st.to_string().c_str());
    return p;
  }
  std::ofstream(dir + "/plan.json") << plan.dump();
  const std::string out = dir + "/peer.json";
  const std::string cmd = "OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " PRISM_SOURCE_DIR "/bench/vlm_peer.py run --model '" +
                          o.model + "' --plan '" + dir + "/plan.json' --inputs '" + dir + "/inputs.safetensors' --out '" +
                          out + "' --dtype " + (o.precision == "f32" ? "f32" : "bf16") + " --threads " +
                          std::to_string(prism::num_threads());
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream f(out);
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    auto check = prism::formats::SafetensorsFile::open(dir + "/check.safetensors");
    if (!j.is_discarded() && check.has_value()) {
      p.ok = true;
      for (const auto& [name, s] : j["scenarios"].items()) {
        p.ttft_s[name] = s.value("ttft_s", 0.0);
        p.encoder_s[name] = s.value("encoder_s", 0.0);
        p.prefill_s[name] = s.value("prefill_s", 0.0);
        p.first_token[name] = s.value("first_token", -1);
      }
      for (const auto& [b, v] : j["encoder_images_per_s"].items()) p.views_per_s[std::atoi(b.c_str())] = v.get<double>();
      for (const char* name : {"rows", "logits"}) {
        auto t = (*check)->get(name);
        if (!t.has_value()) continue;
        const Tensor c = t->contiguous();
        (std::string(name) == "rows" ? p.check_rows : p.check_logits)
            .assign(c.data<float>(), c.data<float>() + c.numel());
      }
    }
  }
  fs::remove_all(dir);
  return p;
}

int usage() {
  std::fprintf(stderr,
               "usage: vlm_bench --model DIR [--precision f32|bf16|int8] [--modes image,turn,video,encoder,peer] "
               "[--no-peer]\n"
               "       [--tiles-per-side 1,2,3] [--pools 1,2,4] [--video-seconds 8] [--video-fps 0.5,1,2]\n"
               "       [--batches 1,2,4,8] [--encoder-repeats 1] [--kv-cache-mib 512] [--seed S]\n");
  return 2;
}

void print_row(const char* what, double prism, double peer, bool lower_is_better = true) {
  if (peer > 0 && prism > 0)
    std::printf("%-44s %10.3f %10.3f %8.2fx\n", what, prism, peer, lower_is_better ? peer / prism : prism / peer);
  else
    std::printf("%-44s %10.3f %10s %9s\n", what, prism, "-", "-");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") o.model = next();
    else if (a == "--precision") o.precision = next();
    else if (a == "--modes") {
      o.modes.clear();
      for (const std::string& m : split(next())) o.modes.insert(m);
    } else if (a == "--no-peer") o.modes.erase("peer");
    else if (a == "--tiles-per-side") o.tiles_per_side = parse_list<int>(next());
    else if (a == "--pools") o.pools = parse_list<int>(next());
    else if (a == "--video-seconds") o.video_seconds = std::atof(next().c_str());
    else if (a == "--video-fps") o.video_fps = parse_list<double>(next());
    else if (a == "--batches") o.batches = parse_list<int>(next());
    else if (a == "--encoder-repeats") o.encoder_repeats = std::max(1, std::atoi(next().c_str()));
    else if (a == "--kv-cache-mib") o.kv_cache_mib = std::atoll(next().c_str());
    else if (a == "--seed") o.seed = static_cast<uint32_t>(std::atoi(next().c_str()));
    else return usage();
  }
  const std::set<std::string> known = {"image", "turn", "video", "encoder", "peer"};
  for (const std::string& m : o.modes)
    if (!known.count(m)) {
      std::fprintf(stderr, "vlm_bench: unknown mode '%s'\n", m.c_str());
      return usage();
    }
  auto precision = prism::ops::parse_precision(o.precision);
  if (o.model.empty() || !precision.has_value() || o.batches.empty() || o.video_seconds <= 0) return usage();
  for (int b : o.batches)
    if (b < 1) return usage();
  auto config = prism::configs::HfConfig::load(o.model);
  if (!config.has_value()) {
    std::fprintf(stderr, "vlm_bench: %s\n", config.status().to_string().c_str());
    return 1;
  }
  const prism::Result<std::string> type = config->get_string("model_type", "");
  const std::string model_type = type.has_value() ? *type : "";
  if (model_type != "idefics3" && model_type != "llava") {
    std::fprintf(stderr, "vlm_bench: %s is not a vision-language model (model_type '%s'; want idefics3 or llava)\n",
                 o.model.c_str(), model_type.c_str());
    return 1;
  }
  const Family family = model_type == "llava" ? Family::llava : Family::idefics3;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures appear as they are measured
  prism::set_num_threads(0);
  std::printf("model %s (%s), precision %s, %d threads\n", o.model.c_str(), model_type.c_str(), o.precision.c_str(),
              prism::num_threads());

  // Every scenario run, in order; the peer reruns those it times. unique_ptr: stable addresses.
  std::vector<std::unique_ptr<Scenario>> scenarios;
  std::string check_name;  // the scenario of the same-weights check: the first image one
  uint32_t image_seed = o.seed * 100000;
  auto fresh_image = [&](int w, int h) { return synthetic_image(w, h, ++image_seed); };
  auto fail = [](const prism::Status& s) {
    std::fprintf(stderr, "vlm_bench: %s\n", s.to_string().c_str());
    return 1;
  };

  // ---- engine modes: one chat deployment, as `prism serve` builds it ----
  const bool engine = o.modes.count("image") || o.modes.count("turn") || o.modes.count("video");
  if (engine) {
    prism::serving::MetricsRegistry metrics;
    prism::serving::EngineFactories factories;
    gen::register_generate_engine(factories);
    auto kind = factories.find("chat");
    if (!kind.has_value()) return fail(kind.status());
    prism::serving::DeploymentConfig c;
    c.name = "bench";
    c.task = "chat";
    c.model = o.model;
    c.precision = o.precision;
    c.timeout_ms = 0;
    c.batching.max_batch_size = 1;
    c.knobs.set("prefix_caching", true);
    c.knobs.set("kv_cache_bytes", o.kv_cache_mib << 20);
    if (const prism::Status s = c.validate(); !s.ok()) return fail(s);
    auto dep = std::make_unique<prism::serving::Deployment>(c, *kind, metrics);
    const auto t0 = Clock::now();
    dep->start();
    if (const prism::Status s = dep->wait_ready(); !s.ok()) return fail(s);
    auto fe = std::dynamic_pointer_cast<const prism::frontends::GenerateFrontend>(dep->frontend());
    if (fe == nullptr || fe->vision() == nullptr)
      return fail(prism::failed_precondition("the deployment has no vision processor"));
    std::printf("deployment ready in %.1f s\n", seconds_since(t0));
    const ScenarioBuilder sb(*fe, family);
    const prism::frontends::VisualBudget defaults = sb.vision().default_budget();
    const int tile = sb.vision().image_config().tile_size;  // idefics3's tile (= the tower's side)

    // The image and budget of "n tiles a side" (Idefics3) or "spatial pool p" (LLaVA).
    auto image_budget = [&](int step) {
      prism::frontends::VisualBudget b = defaults;
      if (family == Family::idefics3) b.image.max_side = step * tile;
      else b.spatial_pool = step;
      return b;
    };
    const int image_w = family == Family::idefics3 ? 3 * std::max(tile, 1) : 640;
    const int image_h = family == Family::idefics3 ? 3 * std::max(tile, 1) : 480;
    auto add = [&](prism::Result<Scenario> s) -> Scenario* {
      if (!s.has_value()) {
        fail(s.status());
        return nullptr;
      }
      scenarios.push_back(std::make_unique<Scenario>(std::move(s).value()));
      return scenarios.back().get();
    };

    // Warm-up (not timed): grows the engine's arenas, touches the KV pages.
    {
      const int step = family == Family::idefics3 ? 2 : 1;
      auto w = sb.build("warmup", "", {fresh_image(image_w, image_h)}, {}, image_budget(step));
      if (!w.has_value()) return fail(w.status());
      if (!run(*dep, *w)) return 1;
    }

    if (o.modes.count("image")) {
      std::printf("\ntime to first token against visual tokens (one fresh image a request, %dx%d; prompt tokens "
                  "include the image's; preprocessing timed apart)\n",
                  image_w, image_h);
      std::printf("%-24s %8s %8s %12s %14s\n", "budget", "visual", "prompt", "TTFT s", "preprocess ms");
      const std::vector<int>& steps = family == Family::idefics3 ? o.tiles_per_side : o.pools;
      for (int step : steps) {
        const std::string label = family == Family::idefics3
                                      ? "max_image_side " + std::to_string(step * tile)
                                      : "spatial_pool " + std::to_string(step);
        Scenario* s = add(sb.build("image_" + std::to_string(step), label, {fresh_image(image_w, image_h)}, {},
                                   image_budget(step)));
        if (s == nullptr || !run(*dep, *s)) return 1;
        if (check_name.empty()) check_name = s->name;
        std::printf("%-24s %8lld %8zu %12.3f %14.1f\n", label.c_str(), static_cast<long long>(s->visual_rows),
                    s->prompt.size(), s->ttft_s, 1e3 * s->preprocess_s);
      }
    }

    if (o.modes.count("turn")) {
      const prism::frontends::VisualBudget b = image_budget(family == Family::idefics3 ? 2 : 1);
      const prism::media::Image a = fresh_image(image_w, image_h);
      const std::string other_preamble = family == Family::idefics3
                                             ? "System: You answer in one short sentence.<end_of_utterance>\n"
                                             : "A chat between a curious user and an artificial intelligence assistant. ";
      Scenario* turn1 = add(sb.build("turn_1", "first turn", {a}, {}, b));
      if (turn1 == nullptr || !run(*dep, *turn1)) return 1;
      turn1->timed_by_peer = false;
      Scenario* cold = add(sb.build("turn_2_cold", "second turn, another image (cold)",
                                    {fresh_image(image_w, image_h)}, {}, b, "", true));
      if (cold == nullptr || !run(*dep, *cold)) return 1;
      cold->timed_by_peer = false;
      Scenario* media_only = add(sb.build("turn_2_media", "same image, another conversation", {a}, {}, b,
                                          other_preamble, true));
      if (media_only == nullptr || !run(*dep, *media_only)) return 1;
      media_only->timed_by_peer = false;
      Scenario* warm = add(sb.build("turn_2", "second turn, same image", {a}, {}, b, "", true));
      if (warm == nullptr || !run(*dep, *warm)) return 1;
      // The peer caches nothing: its second turn encodes the image again. An image step of the
      // same budget has the same views; the peer reuses that encoder time.
      for (const auto& s : scenarios)
        if (s->name.starts_with("image_") && s->media.size() == 1 &&
            s->media[0].views->num_views == warm->media[0].views->num_views &&
            s->media[0].spatial_pool == warm->media[0].spatial_pool)
          warm->peer_encoder_like = s->name;
      std::printf("\nsecond turn about the same image (%lld visual tokens, %zu prompt tokens)\n",
                  static_cast<long long>(warm->visual_rows), warm->prompt.size());
      std::printf("%-44s %10s %8s %8s\n", "", "TTFT s", "cached", "encoded");
      for (const Scenario* s : {cold, media_only, warm})
        std::printf("%-44s %10.3f %8lld %8lld\n", s->label.c_str(), s->ttft_s, static_cast<long long>(s->cached_tokens),
                    static_cast<long long>(s->encoded_items));
      std::printf("media cache alone: %.1fx faster than cold; media + prefix cache: %.1fx (target >= 5x)\n",
                  cold->ttft_s / std::max(media_only->ttft_s, 1e-9), cold->ttft_s / std::max(warm->ttft_s, 1e-9));
    }

    if (o.modes.count("video")) {
      std::printf("\nvideo: time to first token of a %.0f-s clip (640x360 frames, video_spatial_pool %d, temporal_pool "
                  "%d, max %d frames; frames not decoded)\n",
                  o.video_seconds, defaults.video_spatial_pool, defaults.temporal_pool, defaults.video.max_frames);
      std::printf("%-24s %8s %8s %8s %12s %14s\n", "fps", "frames", "visual", "prompt", "TTFT s", "preprocess ms");
      for (double fps : o.video_fps) {
        prism::media::VideoFrames v = synthetic_video(o.video_seconds, fps, ++image_seed);
        const int max_frames = defaults.video.max_frames;
        if (max_frames > 0 && int(v.frames.size()) > max_frames) {  // spread evenly, as decode_video does
          prism::media::VideoFrames capped = v;
          capped.frames.clear();
          capped.timestamps.clear();
          for (int i = 0; i < max_frames; ++i) {
            const size_t k = size_t(i) * v.frames.size() / size_t(max_frames);
            capped.frames.push_back(v.frames[k]);
            capped.timestamps.push_back(v.timestamps[k]);
          }
          v = std::move(capped);
        }
        char label[32];
        std::snprintf(label, sizeof label, "%g", fps);
        Scenario* s =
            add(sb.build("video_" + std::string(label), std::string("video ") + label + " fps", {}, {v}, defaults));
        if (s == nullptr || !run(*dep, *s)) return 1;
        std::printf("%-24s %8zu %8lld %8zu %12.3f %14.1f\n", label, v.frames.size(),
                    static_cast<long long>(s->visual_rows), s->prompt.size(), s->ttft_s, 1e3 * s->preprocess_s);
      }
    }
    dep->stop();
  }

  // ---- the models alone: encoder throughput, the same-weights check ----
  const bool peer = o.modes.count("peer") > 0;
  if (!o.modes.count("encoder") && !peer) return 0;
  auto encoder = prism::models::load_vlm_media_encoder(o.model, *precision);
  if (!encoder.has_value()) return fail(encoder.status());
  const int64_t side = (*encoder)->image_size();
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  // Views for the encoder figures: random pixels in the normalised range (speed does not depend
  // on them; the peer gets the same).
  Tensor encoder_pixels = Tensor::empty({max_batch, 3, side, side}, DType::f32);
  {
    std::mt19937 rng(o.seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < encoder_pixels.numel(); ++i) encoder_pixels.data<float>()[i] = u(rng);
  }
  std::map<int, double> views_per_s;
  double peak = 0;
  if (o.modes.count("encoder")) {
    (*encoder)->encode(encoder_pixels.slice(0, 0, 1).contiguous());  // warm-up (the peer does the same)
    const prism::Result<double> peak_r = prism::measure_gemm_peak(*precision);
    peak = peak_r.has_value() ? *peak_r : 0.0;
    std::printf("\nmedia encoder alone (%lld-px views, %lld rows each, %.1f GFLOP a view; %s GEMM peak %.0f GFLOP/s)\n",
                static_cast<long long>(side), static_cast<long long>((*encoder)->grid_side() * (*encoder)->grid_side()),
                (*encoder)->flops_per_view() * 1e-9, o.precision.c_str(), peak);
    std::printf("%-8s %12s %12s %10s\n", "batch", "views/s", "GFLOP/s", "of peak");
    for (int b : o.batches) {
      const Tensor x = encoder_pixels.slice(0, 0, b).contiguous();
      double best = 1e30;
      for (int r = 0; r < o.encoder_repeats; ++r) {
        const auto t0 = Clock::now();
        (*encoder)->encode(x);
        best = std::min(best, seconds_since(t0));
      }
      views_per_s[b] = b / best;
      const double gflops = (*encoder)->flops_per_view() * b / best * 1e-9;
      std::printf("%-8d %12.2f %12.1f %9.0f%%\n", b, views_per_s[b], gflops, peak > 0 ? 100.0 * gflops / peak : 0.0);
    }
  }
  if (!peer) return 0;

  // The same-weights check: the check scenario's rows and next-token logits, the models alone.
  const Scenario* check = nullptr;
  for (const auto& s : scenarios)
    if (s->name == check_name) check = s.get();
  std::vector<float> rows, logits;
  if (check != nullptr && check->media.size() == 1 && check->media[0].spatial_pool == 1) {
    const Tensor r = (*encoder)->encode(views_tensor(*check->media[0].views)).contiguous();
    rows.assign(r.data<float>(), r.data<float>() + r.numel());
    auto lm = prism::models::load_vlm_language_model(o.model, *precision);
    if (!lm.has_value()) return fail(lm.status());
    const prism::Result<int64_t> image_token =
        config->get_int(family == Family::llava ? "image_token_index" : "image_token_id");
    if (!image_token.has_value()) return fail(image_token.status());
    logits = prompt_logits(**lm, check->prompt, int32_t(*image_token), r);
  }
  encoder->reset();  // the peer needs the memory and the cores

  std::vector<const Scenario*> timed;
  for (const auto& s : scenarios)
    if (s->timed_by_peer && s->name != "warmup") timed.push_back(s.get());
  const PeerFigures p = run_peer(o, timed, encoder_pixels, check_name);
  if (!p.ok) {
    std::fprintf(stderr, "vlm_bench: the PyTorch peer failed\n");
    return 1;
  }
  std::printf("\nagainst the PyTorch peer (%s, same checkpoint and inputs, %d threads; the peer caches nothing: its time "
              "is its encoder + prefill; ratios > 1: Prism faster)\n",
              o.precision == "f32" ? "f32" : "bf16", prism::num_threads());
  std::printf("%-44s %10s %10s %9s\n", "time to first token, s", "prism", "peer", "ratio");
  for (const Scenario* s : timed) {
    const std::string what = s->label + " (" + std::to_string(s->visual_rows) + " visual)";
    print_row(what.c_str(), s->ttft_s, p.ttft_s.count(s->name) ? p.ttft_s.at(s->name) : 0.0);
  }
  for (const Scenario* s : timed)
    if (p.encoder_s.count(s->name))
      std::printf("  peer %-30s encoder %.3f s + prefill %.3f s\n", s->name.c_str(), p.encoder_s.at(s->name),
                  p.prefill_s.at(s->name));
  if (!views_per_s.empty()) {
    std::printf("%-44s %10s %10s %9s\n", "encoder views/s", "prism", "peer", "ratio");
    for (int b : o.batches) {
      const std::string what = "batch " + std::to_string(b);
      print_row(what.c_str(), views_per_s[b], p.views_per_s.count(b) ? p.views_per_s.at(b) : 0.0, false);
    }
  }
  if (check != nullptr && !rows.empty()) {
    const bool rows_ok = p.check_rows.size() == rows.size();
    const bool logits_ok = p.check_logits.size() == logits.size();
    const int32_t peer_first = p.first_token.count(check->name) ? p.first_token.at(check->name) : -1;
    // NOTE: random weights give near-ties among ~50k tokens: at bf16 the top token may differ;
    // its rank in the other side's logits says how near.
    std::printf("same weights check (%s): visual rows differ by %.2e of their largest, next-token logits by %.2e "
                "(%s arithmetic on both sides); first token: engine %d, models alone %d, peer %d (Prism's is the "
                "peer's #%lld, the peer's Prism's #%lld)\n",
                check->label.c_str(), rows_ok ? rel_error(rows.data(), p.check_rows.data(), int64_t(rows.size())) : -1.0,
                logits_ok ? rel_error(logits.data(), p.check_logits.data(), int64_t(logits.size())) : -1.0,
                o.precision == "f32" ? "f32" : "bf16", check->first_token, logits.empty() ? -1 : argmax(logits),
                peer_first, static_cast<long long>(logits_ok ? rank_of(p.check_logits, argmax(logits)) : -1),
                static_cast<long long>(logits_ok ? rank_of(logits, peer_first) : -1));
  }
  return 0;
}

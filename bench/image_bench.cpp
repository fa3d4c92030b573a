// image_bench: the image-generation path (Z-Image) against a PyTorch peer on the same random
// weights, each figure beside the peer or the GEMM ceiling measured in the same run (the
// machine is shared: its speed drifts from minute to minute). Never a test: it asserts nothing
// but that Prism and the peer compute the same thing.
//
//   build/bench/image_bench [--quick] [--layers 2] [--text-layers 2] [--rounds 2] [--passes 2]
//                           [--sizes 512,1024] [--caption 128] [--work-dir DIR] [--no-text] [--no-vae]
//
// NOTE: the real transformer (Tongyi-MAI/Z-Image-Turbo: dim 3840, 30 layers) is 12 GB in bf16
// and this machine cannot hold two copies, so by default the checkpoint has --layers main
// layers (plus the 2 + 2 refiners): Prism and the peer (bench/image_peer.py) run it in
// separate processes one after the other, round after round, each timing the pass in parts
// (embedding + refiners + final layer, and each main layer), and the 30-layer step is
// extrapolated as those parts + 30 x the fastest main layer (all have the same shapes; the best
// repetition is the bench's convention on this noisy machine). --layers 30 runs the whole
// model, and the step is the best measured pass.
// The text encoder (Qwen3-4B's sizes) is done the same way: --text-layers of its 35 used layers
// (Z-Image conditions on hidden_states[-2] of 36), extrapolated.
// Figures: seconds per pass (one conditional row) at each size; the Prism / PyTorch ratio; the
// block's linears and attention core run alone at the pass's sequence length (both sides'
// own ops: Prism's fused qkv / w13 bf16 linears and f32 attention kernel, the peer's bf16
// F.linear and matmul attention) as GFLOP/s and fractions of oneDNN's bf16 and f32 GEMM peaks
// (runtime/gemm_peak.h, measured in this process before and after the rounds, the better kept);
// model passes per image counted by engines/denoise's DenoiseLoop on a free fake denoiser
// (Turbo: 8 steps, no CFG; Base: 50 steps with CFG, and CFG stopped at 60% of the steps or by
// Z-Image's cfg_truncation 0.6) times the seconds per pass, plus the text encoding; Prism's
// peak RSS (VmHWM) against its packed weight bytes.
// The VAE decode share: models/vae's AutoencoderKL decoder (f32, FLUX.1's VAE config, random
// weights) on one latent per size, whole (not tiled), against the peer's restatement of
// diffusers' decode (tests/reference/vae_decoder.py) in float32; once, after the rounds (a
// 1024^2 decode is ~10 TFLOP: minutes).
// Weights are written once per configuration under --work-dir (default: <build>/image-bench)
// by image_peer.py and reused. Runs on the best instruction-set tier (PRISM_ISA picks another).
// Internal: `--role transformer|text|vae --model DIR --out JSON` is one Prism measurement process.
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "configs/scheduler_config.h"
#include "configs/z_image_config.h"
#include "engines/denoise/denoise_loop.h"
#include "engines/denoise/flow_schedule.h"
#include "formats/safetensors.h"
#include "models/denoiser.h"
#include "models/encoder.h"
#include "models/llama/llama_text_encoder.h"
#include "models/vae/autoencoder_kl.h"
#include "models/z_image/z_image.h"
#include "runtime/arena.h"
#include "runtime/gemm_peak.h"
#include "runtime/isa.h"
#include "runtime/threads.h"

namespace {

namespace fs = std::filesystem;
namespace dn = prism::engines::denoise;
using nlohmann::json;
using prism::DType;
using prism::Tensor;
using prism::ops::Precision;
using Clock = std::chrono::steady_clock;

constexpr int kRealLayers = 30;        // Z-Image's main layers
constexpr int kRealTextLayers = 35;    // Qwen3-4B's 36 layers, hidden_states[-2]: the first 35
constexpr int kVaeFactor = 8;          // pixels per latent cell (the FLUX VAE)

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
  bool quick = false;
  int layers = 2;
  int text_layers = 2;
  int rounds = 2;
  int passes = 2;
  int threads = 2;
  std::vector<int> sizes = {512, 1024};  // pixels, square
  int caption = 128;                     // caption tokens (padded to 32 by the model)
  std::string work_dir;
  bool text = true;
  bool vae = true;
  // --role: one measurement process.
  std::string role, model, out, check;
  bool ops = false;
};

std::vector<int> parse_int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::atoi(item.c_str()));
  return out;
}

Tensor random_tensor(const prism::Dims& shape, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

int64_t proc_status_kb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  int64_t kb = 0;
  std::string rest;
  while (f >> k) {
    if (k == key) {
      f >> kb;
      return kb;
    }
    std::getline(f, rest);
  }
  return 0;
}

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string k, unit;
  int64_t kb = 0;
  while (f >> k >> kb >> unit)
    if (k == "MemAvailable:") return kb << 10;
  return 0;
}

int64_t disk_free_bytes(const std::string& path) {
  struct statvfs s {};
  if (statvfs(path.c_str(), &s) != 0) return 0;
  return int64_t(s.f_bavail) * int64_t(s.f_frsize);
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five;
  f >> one >> five;
  return one + " (1 min), " + five + " (5 min)";
}

double gib(double bytes) { return bytes / double(int64_t(1) << 30); }

double best_of(int reps, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// ---- Prism: one measurement process ----------------------------------------------------------

// Relative L2 error of got against ref (same numel, f32).
double rel_l2(const Tensor& got, const Tensor& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double d = double(got.data<float>()[i]) - double(ref.data<float>()[i]);
    num += d * d;
    den += double(ref.data<float>()[i]) * double(ref.data<float>()[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The check row image_peer.py wrote (x, cap, t, out_bf16, out_f32) through Prism.
json run_check(const prism::models::ZImageTransformer& model, const std::string& path) {
  auto file = prism::formats::SafetensorsFile::open(path);
  if (!file.has_value()) return {{"error", file.status().message()}};
  auto get = [&](const char* name) {
    prism::Result<Tensor> t = (*file)->get(name);
    PRISM_CHECK(t.has_value());
    return t->clone();
  };
  const Tensor out_bf16 = get("out_bf16"), out_f32 = get("out_f32");
  prism::models::ZImageRow row{get("x"), get("t").data<float>()[0], get("cap")};
  const std::vector<Tensor> got = model.forward({row});
  PRISM_CHECK(got[0].numel() == out_f32.numel());
  const Tensor y = got[0].contiguous();
  return {{"prism_vs_f32", rel_l2(y, out_f32)},
          {"prism_vs_peer_bf16", rel_l2(y, out_bf16)},
          {"peer_bf16_vs_f32", rel_l2(out_bf16, out_f32)}};
}

// One main block's linears (Prism's packing: fused qkv, fused w1/w3) and its attention core
// alone at `tokens` tokens, best of 3.
json block_ops(const prism::configs::ZImageConfig& c, int64_t tokens) {
  const int64_t d = c.dim, inter = c.ffn_hidden(), heads = c.n_heads, hd = c.head_dim();
  auto pack = [&](int64_t out, int64_t in, uint32_t seed) {
    prism::Result<prism::ops::LinearWeight> w =
        prism::ops::pack_linear(random_tensor({out, in}, seed, 0.02f), Tensor(), Precision::bf16);
    PRISM_CHECK(w.has_value());
    return *w;
  };
  const prism::ops::LinearWeight qkv = pack(3 * d, d, 1), o = pack(d, d, 2), w13 = pack(2 * inter, d, 3),
                                 w2 = pack(d, inter, 4);
  const Tensor x = random_tensor({tokens, d}, 5), xi = random_tensor({tokens, inter}, 6);
  auto linears = [&] {
    prism::ops::linear(x, qkv);
    prism::ops::linear(x, o);
    prism::ops::linear(x, w13);
    prism::ops::linear(xi, w2);
  };
  const Tensor q = random_tensor({tokens, heads, hd}, 7), k = random_tensor({tokens, heads, hd}, 8),
               v = random_tensor({tokens, heads, hd}, 9);
  const Tensor cu = Tensor::from<int32_t>({0, int32_t(tokens)}, {2});
  auto attention = [&] { prism::ops::attention(q, k, v, {cu, cu, Tensor()}, {.causal = false}); };
  linears();
  attention();
  return {{"linear_s", best_of(3, linears)}, {"attention_s", best_of(3, attention)}, {"tokens", tokens}};
}

int role_transformer(const Options& o) {
  const auto t0 = Clock::now();
  auto loaded = prism::models::load_z_image_transformer(o.model, Precision::bf16);
  if (!loaded.has_value()) {
    std::fprintf(stderr, "image_bench: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const prism::models::ZImageTransformer& model = **loaded;
  const prism::configs::ZImageConfig& c = model.config();
  // After load: what is resident now, anonymous (packed weights) and file-backed (the mapped
  // checkpoint, if the loader keeps it mapped).
  json r = {{"load_s", seconds_since(t0)}, {"weight_bytes", model.weight_bytes()}, {"n_layers", c.n_layers},
            {"after_load", {{"rss_anon_bytes", proc_status_kb("RssAnon:") << 10},
                            {"rss_file_bytes", proc_status_kb("RssFile:") << 10}}},
            {"threads", prism::num_threads()}, {"sizes", json::array()}};
  if (!o.check.empty()) r["check"] = run_check(model, o.check);
  prism::Arena arena;
  for (int px : o.sizes) {
    const int64_t hw = px / kVaeFactor;
    prism::models::ZImageRow row{random_tensor({c.in_channels, 1, hw, hw}, 11), 0.5f,
                                 random_tensor({o.caption, c.cap_feat_dim}, 12)};
    // Over the timed passes: the best pass ("total"), the best of all but the main layers
    // ("fixed": begin + end), the fastest single main block ("layer": they all have the same
    // shapes, so this is the best repetition of one; the shared machine makes single runs
    // swing 2-4x).
    double total = 1e30, fixed = 1e30, layer = 1e30;
    for (int p = 0; p < o.passes + 1; ++p) {  // the first untimed: primitives, first touch
      arena.reset();
      prism::ArenaScope scope(&arena);
      const auto a = Clock::now();
      std::unique_ptr<prism::models::ZImageState> st = model.begin({row});
      const double begin_s = seconds_since(a);
      double layers_s = 0, fastest = 1e30;
      for (int l = 0; l < int(c.n_layers); ++l) {
        const auto b = Clock::now();
        model.run_layers(*st, l, l + 1);
        const double s = seconds_since(b);
        layers_s += s;
        fastest = std::min(fastest, s);
      }
      const auto e = Clock::now();
      model.end(*st);
      const double end_s = seconds_since(e);
      if (p == 0) continue;
      total = std::min(total, begin_s + layers_s + end_s);
      fixed = std::min(fixed, begin_s + end_s);
      layer = std::min(layer, fastest);
    }
    const json best = {{"total", total}, {"fixed", fixed}, {"layer", layer}};
    const int64_t image_tokens = (hw / 2) * (hw / 2);
    json entry = {{"px", px}, {"image_tokens", image_tokens}, {"caption_tokens", o.caption}, {"seconds", best},
                  {"flops", model.flops(image_tokens, o.caption)}};
    if (o.ops) {
      const int64_t tokens = prism::configs::ZImageConfig::padded(image_tokens) +
                             prism::configs::ZImageConfig::padded(o.caption);
      entry["ops"] = block_ops(c, tokens);
    }
    r["sizes"].push_back(entry);
  }
  r["vm_hwm_bytes"] = proc_status_kb("VmHWM:") << 10;
  r["at_end"] = {{"rss_anon_bytes", proc_status_kb("RssAnon:") << 10},
                 {"rss_file_bytes", proc_status_kb("RssFile:") << 10}};
  std::ofstream(o.out) << r.dump(1);
  return 0;
}

int role_text(const Options& o) {
  const auto t0 = Clock::now();
  prism::models::LlamaTextEncoderOptions eo;
  eo.hidden_states_index = -1;  // every layer of the subset checkpoint (then the final norm)
  auto loaded = prism::models::load_llama_text_encoder(o.model, Precision::bf16, eo);
  if (!loaded.has_value()) {
    std::fprintf(stderr, "image_bench: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const prism::models::Encoder& enc = **loaded;
  const double load_s = seconds_since(t0);
  std::vector<int32_t> ids(size_t(o.caption));
  std::mt19937 rng(3);
  for (int32_t& id : ids) id = int32_t(rng() % 4000);
  prism::models::EncoderBatch batch;
  batch.token_ids = Tensor::from<int32_t>(std::span<const int32_t>(ids), {int64_t(ids.size())});
  batch.cu_seqlens = Tensor::from<int32_t>({0, int32_t(ids.size())}, {2});
  prism::Arena arena;
  auto encode = [&] {
    arena.reset();
    prism::ArenaScope scope(&arena);
    enc.encode(batch);
  };
  encode();
  const double s = best_of(std::max(2, o.passes), encode);
  json r = {{"load_s", load_s}, {"seconds", s}, {"tokens", o.caption}, {"flops", enc.flops(o.caption)},
            {"vm_hwm_bytes", proc_status_kb("VmHWM:") << 10}};
  std::ofstream(o.out) << r.dump(1);
  return 0;
}

int role_vae(const Options& o) {
  auto loaded = prism::models::AutoencoderKLDecoder::load(o.model);
  if (!loaded.has_value()) {
    std::fprintf(stderr, "image_bench: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const prism::models::AutoencoderKLDecoder& vae = **loaded;
  const int64_t channels = vae.config().latent_channels;
  vae.decode(random_tensor({1, channels, 8, 8}, 21));  // untimed: primitives, first touch
  json r = {{"weight_bytes", vae.weight_bytes()}, {"sizes", json::array()}};
  for (int px : o.sizes) {
    const int64_t hw = px / kVaeFactor;
    const Tensor z = random_tensor({1, channels, hw, hw}, 22);
    const auto t0 = Clock::now();
    vae.decode(z);
    r["sizes"].push_back({{"px", px}, {"seconds", seconds_since(t0)}});
  }
  r["vm_hwm_bytes"] = proc_status_kb("VmHWM:") << 10;
  std::ofstream(o.out) << r.dump(1);
  return 0;
}

// ---- passes per image: the engine's loop on a free fake ----------------------------------------

// v = 0 for every row; counts nothing itself (the loop's counters do).
class ZeroDenoiser : public prism::models::Denoiser {
 public:
  struct State : prism::models::DenoiseState {
    std::vector<prism::Dims> shapes;
  };
  std::unique_ptr<prism::models::DenoiseState> begin(const prism::models::DenoiseBatch& batch) const override {
    auto s = std::make_unique<State>();
    for (const Tensor& l : batch.latents) s->shapes.push_back(l.shape());
    return s;
  }
  void run_blocks(prism::models::DenoiseState&, int, int) const override {}
  std::vector<Tensor> end(prism::models::DenoiseState& state) const override {
    std::vector<Tensor> out;
    for (const prism::Dims& d : static_cast<State&>(state).shapes) out.push_back(Tensor::zeros(d, DType::f32));
    return out;
  }
  int num_blocks() const override { return kRealLayers; }
  int64_t hidden_size() const override { return 3840; }
  int64_t latent_channels() const override { return 16; }
  int64_t size_multiple() const override { return 16; }
  double flops(int64_t, int64_t) const override { return 0; }
};

struct PassCount {
  std::string name;
  int64_t steps = 0, cond = 0, uncond = 0;
  int64_t passes() const { return cond + uncond; }
};

// One 1024^2 request through DenoiseLoop with Z-Image's schedule (FlowMatchEuler, shift 3,
// the pipeline's default sigmas); guidance as given; the loop's counters say the passes.
PassCount count_passes(const std::string& name, int steps, std::optional<prism::engines::denoise::GuidanceParams> cfg) {
  prism::configs::SchedulerConfig sc;
  sc.shift = 3.0;  // Tongyi-MAI/Z-Image-Turbo scheduler/scheduler_config.json
  dn::ScheduleRequest sr;
  sr.num_steps = steps;
  sr.sigmas = dn::z_image_default_sigmas(steps);
  prism::Result<dn::FlowSchedule> schedule = dn::make_flow_schedule(sc, sr);
  PRISM_CHECK(schedule.has_value());
  dn::DenoiseRequest r;
  r.id = 1;
  r.latent_shape = {16, 128, 128};
  r.cond = Tensor::zeros({128, 8}, DType::f32);
  if (cfg) {
    r.uncond = Tensor::zeros({128, 8}, DType::f32);
    r.guidance = *cfg;
  }
  r.schedule = *schedule;
  dn::DenoiseLoop loop;
  PRISM_CHECK(loop.add(r).ok());
  ZeroDenoiser model;
  for (int i = 0; i < 10000 && loop.num_running() > 0; ++i) loop.step(model, 0);
  return {name, loop.counters().steps, loop.counters().cond_passes, loop.counters().uncond_passes};
}

std::vector<PassCount> pass_counts() {
  dn::GuidanceParams base;
  base.guidance_scale = 5.0;  // Z-Image's guidance 4 is w = 1 + 4 here; the count does not depend on it
  dn::GuidanceParams stop = base;
  stop.interval_stop = 0.6;
  dn::GuidanceParams trunc = base;
  trunc.cfg_truncation = 0.6;
  return {count_passes("Turbo, 8 steps, no CFG", 8, std::nullopt),
          count_passes("Base, 50 steps, CFG", 50, base),
          count_passes("Base, 50 steps, CFG on the first 60% of steps", 50, stop),
          count_passes("Base, 50 steps, CFG, cfg_truncation 0.6", 50, trunc)};
}

// ---- the orchestrating process --------------------------------------------------------------------

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

std::optional<json> read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

bool run(const std::string& cmd) {
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) std::fprintf(stderr, "image_bench: failed (%d): %s\n", rc, cmd.c_str());
  return rc == 0;
}

std::string peer_script() { return std::string(PRISM_SOURCE_DIR) + "/bench/image_peer.py"; }

std::string sizes_arg(const std::vector<int>& sizes, bool latents) {
  std::string s;
  for (int px : sizes) {
    if (!s.empty()) s += ",";
    const int hw = px / kVaeFactor;
    s += latents ? std::to_string(hw) + "x" + std::to_string(hw) : std::to_string(px);
  }
  return s;
}

// Bytes of the bf16 checkpoint at `layers` main layers (the blocks' matrices dominate).
double transformer_bytes(bool quick, int layers) {
  const double d = quick ? 256 : 3840, inter = std::floor(d / 3 * 8), refiners = quick ? 1 : 2;
  const double block = 4 * d * d + 3 * d * inter + 4 * d * 256;
  return 2 * block * (layers + 2 * refiners) + 64e6;
}
double text_bytes(bool quick, int layers) {
  if (quick) return 8e6;
  const double h = 2560, inter = 9728, layer = h * 4096 * 2 + h * 1024 * 2 + 3 * h * inter;
  return 2 * (layer * layers + 151936 * h);
}

// Writes the checkpoint with image_peer.py unless its config is there already.
bool ensure_checkpoint(const std::string& kind, const std::string& dir, const std::string& marker, int layers,
                       bool quick, double bytes) {
  if (fs::exists(dir + "/" + marker)) {
    std::printf("%s checkpoint: %s (reused)\n", kind.c_str(), dir.c_str());
    return true;
  }
  fs::create_directories(dir);
  const double disk = double(disk_free_bytes(dir)), mem = double(mem_available_bytes());
  std::printf("%s checkpoint: writing %.2f GiB to %s (disk free %.1f GiB, memory available %.1f GiB)\n", kind.c_str(),
              gib(bytes), dir.c_str(), gib(disk), gib(mem));
  if (disk < bytes * 1.1 + double(1 << 30)) {
    std::fprintf(stderr, "image_bench: not enough disk for the %s checkpoint\n", kind.c_str());
    return false;
  }
  if (mem < std::min(bytes, 2.2e9) + 2e9) {  // the writer holds one ~2 GB shard at a time
    std::fprintf(stderr, "image_bench: not enough memory to write the %s checkpoint\n", kind.c_str());
    return false;
  }
  const std::string sub = kind == "transformer" ? "write-transformer" : kind == "vae" ? "write-vae" : "write-text";
  const auto t0 = Clock::now();
  const bool ok = run("/usr/bin/python3 " + shell_quote(peer_script()) + " " + sub + " --out " + shell_quote(dir) +
                      (kind == "vae" ? "" : " --layers " + std::to_string(layers)) + (quick ? " --quick" : ""));
  if (ok) std::printf("  written in %.0f s\n", seconds_since(t0));
  return ok;
}

struct Peaks {
  double bf16 = 0, f32 = 0;
  void measure() {
    const prism::Result<double> b = prism::measure_gemm_peak(Precision::bf16);
    const prism::Result<double> f = prism::measure_gemm_peak(Precision::f32);
    if (b.has_value()) bf16 = std::max(bf16, *b);
    if (f.has_value()) f32 = std::max(f32, *f);
  }
};

// Per size, each figure's best (smallest) over the rounds, independently.
std::vector<json> best_sizes(const std::vector<json>& runs) {
  std::vector<json> best;
  for (const json& r : runs)
    for (size_t i = 0; i < r["sizes"].size(); ++i) {
      const json& e = r["sizes"][i];
      if (best.size() <= i) {
        best.push_back(e);
        continue;
      }
      for (const char* k : {"total", "fixed", "layer"})
        best[i]["seconds"][k] = std::min(best[i]["seconds"][k].get<double>(), e["seconds"][k].get<double>());
      if (e.contains("ops"))
        for (const char* k : {"linear_s", "attention_s"})
          best[i]["ops"][k] = std::min(best[i]["ops"][k].get<double>(), e["ops"][k].get<double>());
    }
  return best;
}

// Seconds of one 30-layer step from a K-layer pass: all but the main layers + 30 x the fastest
// main layer; with all 30 layers in the checkpoint, the best measured pass.
struct Step {
  double fixed = 0, per_layer = 0, measured = 0;  // measured: 0 unless the whole model ran
  double full() const { return measured > 0 ? measured : fixed + kRealLayers * per_layer; }
};
Step step_of(const json& e, bool whole_model) {
  return {e["seconds"]["fixed"].get<double>(), e["seconds"]["layer"].get<double>(),
          whole_model ? e["seconds"]["total"].get<double>() : 0.0};
}

int orchestrate(const Options& o, const std::string& exe) {
  const std::string tag = o.quick ? "-quick" : "";
  const std::string zdir = o.work_dir + "/z-image-turbo-L" + std::to_string(o.layers) + tag;
  const std::string tdir = o.work_dir + "/qwen3-4b-L" + std::to_string(o.text_layers) + tag;
  const bool extrapolated = o.layers != kRealLayers;
  std::printf("image_bench: Z-Image-Turbo transformer%s, bf16 weights (random), %d threads, %s kernels, %d round(s)\n",
              o.quick ? " (--quick: a tiny config)" : "", o.threads,
              std::string(prism::isa_name(prism::active_isa())).c_str(), o.rounds);
  std::printf("main layers in the checkpoint: %d of %d (%s)\n", o.layers, kRealLayers,
              extrapolated ? "the 30-layer step is extrapolated" : "the whole model, measured");
  if (!ensure_checkpoint("transformer", zdir, "transformer/diffusion_pytorch_model.safetensors.index.json", o.layers,
                         o.quick, transformer_bytes(o.quick, o.layers)))
    return 1;
  if (o.text && !ensure_checkpoint("text encoder", tdir, "config.json", o.text_layers, o.quick,
                                   text_bytes(o.quick, o.text_layers)))
    return 1;
  const std::string vdir = o.work_dir + "/flux-vae" + tag;
  if (o.vae && !ensure_checkpoint("vae", vdir, "config.json", 0, o.quick, o.quick ? 1e6 : 340e6)) return 1;
  const double mem = double(mem_available_bytes()), need = transformer_bytes(o.quick, o.layers) + 2e9;
  if (mem < need) {
    std::fprintf(stderr, "image_bench: %.1f GiB available, one process needs about %.1f GiB; use fewer --layers\n",
                 gib(mem), gib(need));
    return 1;
  }

  // Correctness guard: the peer's small row (bf16 and float32), then Prism on the same inputs.
  const std::string check = o.work_dir + "/check" + tag + ".safetensors";
  if (!run("OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " + shell_quote(peer_script()) + " check --model " +
           shell_quote(zdir) + " --out " + shell_quote(check)))
    return 1;

  const std::string load_before = load_average();
  Peaks peaks;
  peaks.measure();
  const std::string threads = " --threads " + std::to_string(o.threads);
  std::vector<json> prism_runs, peer_runs, prism_text, peer_text;
  for (int round = 0; round < o.rounds; ++round) {
    std::printf("round %d/%d: Prism, then the peer ...\n", round + 1, o.rounds);
    const std::string pj = o.work_dir + "/prism" + tag + ".json", qj = o.work_dir + "/peer" + tag + ".json";
    fs::remove(pj);
    fs::remove(qj);
    const bool first = round == 0;
    if (!run(shell_quote(exe) + " --role transformer --model " + shell_quote(zdir) + " --out " + shell_quote(pj) +
             " --sizes " + sizes_arg(o.sizes, false) + " --caption " + std::to_string(o.caption) + " --passes " +
             std::to_string(o.passes) + threads + " --ops" + (first ? " --check " + shell_quote(check) : "")))
      return 1;
    if (auto j = read_json(pj)) prism_runs.push_back(*j);
    if (!run("OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " + shell_quote(peer_script()) + " run-transformer --model " +
             shell_quote(zdir) + " --out " + shell_quote(qj) + " --latents " + sizes_arg(o.sizes, true) +
             " --caption " + std::to_string(o.caption) + " --passes " + std::to_string(o.passes) + threads + " --ops"))
      return 1;
    if (auto j = read_json(qj)) peer_runs.push_back(*j);
    if (o.text) {
      const std::string tp = o.work_dir + "/prism-text" + tag + ".json", tq = o.work_dir + "/peer-text" + tag + ".json";
      if (!run(shell_quote(exe) + " --role text --model " + shell_quote(tdir) + " --out " + shell_quote(tp) +
               " --caption " + std::to_string(o.caption) + " --passes 3" + threads))
        return 1;
      if (auto j = read_json(tp)) prism_text.push_back(*j);
      if (!run("OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " + shell_quote(peer_script()) + " run-text --model " +
               shell_quote(tdir) + " --out " + shell_quote(tq) + " --tokens " + std::to_string(o.caption) +
               " --passes 3" + threads))
        return 1;
      if (auto j = read_json(tq)) peer_text.push_back(*j);
    }
  }
  std::optional<json> prism_vae, peer_vae;
  if (o.vae) {
    std::printf("VAE decode: Prism, then the peer ...\n");
    const std::string vp = o.work_dir + "/prism-vae" + tag + ".json", vq = o.work_dir + "/peer-vae" + tag + ".json";
    if (!run(shell_quote(exe) + " --role vae --model " + shell_quote(vdir) + " --out " + shell_quote(vp) + " --sizes " +
             sizes_arg(o.sizes, false) + threads))
      return 1;
    prism_vae = read_json(vp);
    if (!run("OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " + shell_quote(peer_script()) + " run-vae --model " +
             shell_quote(vdir) + " --out " + shell_quote(vq) + " --latents " + sizes_arg(o.sizes, true) + threads))
      return 1;
    peer_vae = read_json(vq);
  }
  peaks.measure();
  if (prism_runs.empty() || peer_runs.empty()) return 1;

  // ---- the figures ----
  const json& first = prism_runs[0];
  const json& chk = first["check"];
  std::printf("\nsame computation (a 32x32 latent, 40 caption tokens, through the benched checkpoint), relative L2:\n");
  const double prism_err = chk.value("prism_vs_f32", 1.0), peer_err = chk.value("peer_bf16_vs_f32", 1.0);
  // bf16 tolerance: Prism's error against the float32 peer within twice the peer's own bf16
  // error, or 2%.
  const bool agree = prism_err <= std::max(2 * peer_err, 0.02);
  std::printf("  Prism bf16 vs peer float32 %.2e, peer bf16 vs peer float32 %.2e, Prism vs peer bf16 %.2e: %s\n",
              prism_err, peer_err, chk.value("prism_vs_peer_bf16", 1.0), agree ? "agree" : "DISAGREE");
  if (!agree) {
    std::fprintf(stderr, "image_bench: Prism and the peer do not compute the same thing; figures not printed\n");
    return 1;
  }
  std::printf("machine load average: %s before the rounds, %s after (2 cores: above ~2 the figures are\n"
              "  slowed by other processes; ratios of neighbouring measurements hold better than seconds)\n",
              load_before.c_str(), load_average().c_str());
  std::printf("GEMM peak (oneDNN via ops::linear, 1024^3, best of before/after the rounds): "
              "bf16 %.0f GFLOP/s, f32 %.0f GFLOP/s\n",
              peaks.bf16, peaks.f32);

  const std::vector<json> pb = best_sizes(prism_runs), qb = best_sizes(peer_runs);
  std::printf("\nper pass (one conditional row, %d caption tokens), best of %zu round(s)%s; ratio > 1: Prism faster\n",
              o.caption, prism_runs.size(), extrapolated ? "; 30-layer figures EXTRAPOLATED" : "");
  std::printf("%-44s", "");
  for (int px : o.sizes) std::printf(" %10dpx %10s", px, "");
  std::printf("\n%-44s", "");
  for (size_t i = 0; i < o.sizes.size(); ++i) std::printf(" %12s %10s", "prism", "peer");
  std::printf("\n");
  std::vector<Step> ps, qs;
  for (size_t i = 0; i < pb.size(); ++i) {
    ps.push_back(step_of(pb[i], !extrapolated));
    qs.push_back(step_of(qb[i], !extrapolated));
  }
  auto row = [&](const char* label, const std::function<double(size_t, bool)>& f, const char* fmt = " %12.3f %10.3f") {
    std::printf("%-44s", label);
    for (size_t i = 0; i < pb.size(); ++i) std::printf(fmt, f(i, true), f(i, false));
    std::printf("\n");
  };
  std::printf("%-44s", "tokens: image + caption (each padded to 32)");
  for (size_t i = 0; i < pb.size(); ++i) {
    const std::string t = std::to_string(pb[i]["image_tokens"].get<int64_t>()) + " + " +
                          std::to_string(prism::configs::ZImageConfig::padded(o.caption));
    std::printf(" %23s", t.c_str());
  }
  std::printf("\n");
  row("best measured pass s (K main layers + rest)",
      [&](size_t i, bool p) { return (p ? pb[i] : qb[i])["seconds"]["total"].get<double>(); });
  row("  of which refiners + embed + final s", [&](size_t i, bool p) { return (p ? ps : qs)[i].fixed; });
  row("  per main layer s (fastest block)", [&](size_t i, bool p) { return (p ? ps : qs)[i].per_layer; });
  row(extrapolated ? "step s, 30 layers (extrapolated)" : "step s, 30 layers",
      [&](size_t i, bool p) { return (p ? ps : qs)[i].full(); });
  std::printf("%-44s", "Prism / PyTorch (per step; goal >= 1.5x)");
  for (size_t i = 0; i < pb.size(); ++i) std::printf(" %11.2fx %10s", qs[i].full() / ps[i].full(), "");
  std::printf("\n");
  row("pass GFLOP/s (measured pass)", [&](size_t i, bool p) {
    return pb[i]["flops"].get<double>() / (p ? pb[i] : qb[i])["seconds"]["total"].get<double>() * 1e-9;
  }, " %12.0f %10.0f");
  row("  as % of the bf16 GEMM peak", [&](size_t i, bool p) {
    const double s = (p ? pb[i] : qb[i])["seconds"]["total"].get<double>();
    return 100 * pb[i]["flops"].get<double>() / s * 1e-9 / peaks.bf16;
  }, " %11.0f%% %9.0f%%");

  // The block's ops alone.
  const bool have_ops = pb[0].contains("ops") && qb[0].contains("ops");
  if (have_ops) {
    std::printf("\none main block's ops alone at the pass's sequence length (each side's own: Prism fused bf16 "
                "linears,\n"
                "f32 attention kernel; the peer's bf16 F.linear, bf16 matmul attention with its mask), best of 3:\n");
    const double d = o.quick ? 256 : 3840, inter = std::floor(d / 3 * 8);
    auto lin = [&](size_t i, bool p) {
      const json& e = (p ? pb : qb)[i]["ops"];
      const double t = e["tokens"].get<double>();
      return 2 * t * (4 * d * d + 3 * d * inter) / e["linear_s"].get<double>() * 1e-9;
    };
    auto att = [&](size_t i, bool p) {
      const json& e = (p ? pb : qb)[i]["ops"];
      const double t = e["tokens"].get<double>();
      return 4 * t * t * d / e["attention_s"].get<double>() * 1e-9;
    };
    row("linears GFLOP/s", lin, " %12.0f %10.0f");
    row("  % of bf16 GEMM peak", [&](size_t i, bool p) { return 100 * lin(i, p) / peaks.bf16; }, " %11.0f%% %9.0f%%");
    row("  % of f32 GEMM peak", [&](size_t i, bool p) { return 100 * lin(i, p) / peaks.f32; }, " %11.0f%% %9.0f%%");
    row("attention GFLOP/s", att, " %12.0f %10.0f");
    row("  % of bf16 GEMM peak", [&](size_t i, bool p) { return 100 * att(i, p) / peaks.bf16; }, " %11.0f%% %9.0f%%");
    row("  % of f32 GEMM peak", [&](size_t i, bool p) { return 100 * att(i, p) / peaks.f32; }, " %11.0f%% %9.0f%%");
    row("linears + attention s (per block)", [&](size_t i, bool p) {
      const json& e = (p ? pb : qb)[i]["ops"];
      return e["linear_s"].get<double>() + e["attention_s"].get<double>();
    });
  }

  // Text encoding.
  double text_prism = 0, text_peer = 0;
  if (o.text && !prism_text.empty() && !peer_text.empty()) {
    double pt = 1e30, qt = 1e30;
    for (const json& j : prism_text) pt = std::min(pt, j["seconds"].get<double>());
    for (const json& j : peer_text) qt = std::min(qt, j["seconds"].get<double>());
    text_prism = pt / o.text_layers * kRealTextLayers;
    text_peer = qt / o.text_layers * kRealTextLayers;
    std::printf("\ntext encoder (%s, bf16, %d-token prompt; %d of %d layers measured):\n",
                o.quick ? "--quick: a tiny Qwen3" : "Qwen3-4B sizes", o.caption,
                o.text_layers, kRealTextLayers);
    std::printf("  measured s: Prism %.3f, peer %.3f; %d layers%s: Prism %.2f, peer %.2f (Prism %.2fx)\n", pt, qt,
                kRealTextLayers, o.text_layers == kRealTextLayers ? "" : " (extrapolated)", text_prism, text_peer,
                text_peer / text_prism);
  }

  // VAE decode.
  std::vector<double> vae_prism(o.sizes.size(), 0.0), vae_peer(o.sizes.size(), 0.0);
  if (prism_vae && peer_vae) {
    std::printf("\nVAE decode (%s, f32, one image, whole; measured once):\n",
                o.quick ? "--quick: a tiny AutoencoderKL" : "FLUX.1's AutoencoderKL decoder");
    for (size_t i = 0; i < o.sizes.size(); ++i) {
      vae_prism[i] = (*prism_vae)["sizes"][i]["seconds"].get<double>();
      vae_peer[i] = (*peer_vae)["sizes"][i]["seconds"].get<double>();
      std::printf("  %dpx: Prism %.2f s, peer %.2f s (Prism %.2fx)\n", o.sizes[i], vae_prism[i], vae_peer[i],
                  vae_peer[i] / vae_prism[i]);
    }
    std::printf("  peak RSS: Prism %.2f GiB (%.2f GiB of f32 weights), peer %.2f GiB\n",
                gib((*prism_vae)["vm_hwm_bytes"].get<double>()), gib((*prism_vae)["weight_bytes"].get<double>()),
                gib((*peer_vae)["vm_hwm_bytes"].get<double>()));
  }

  // Seconds per image.
  const std::vector<PassCount> counts = pass_counts();
  std::printf("\nseconds per image = model passes (counted by DenoiseLoop) x step s + text encodes + VAE decode%s\n",
              extrapolated || o.text_layers != kRealTextLayers ? " (extrapolated figures)" : "");
  if (!prism_vae || !peer_vae) std::printf("  VAE decode: not included (--no-vae)\n");
  std::printf("%-48s %7s", "", "passes");
  for (int px : o.sizes) std::printf(" %7dpx prism %7s", px, "peer");
  std::printf("\n");
  for (const PassCount& pc : counts) {
    const int encodes = pc.uncond > 0 ? 2 : 1;  // the negative prompt is encoded too
    std::printf("%-48s %3lld+%-3lld", pc.name.c_str(), (long long)pc.cond, (long long)pc.uncond);
    for (size_t i = 0; i < ps.size(); ++i)
      std::printf(" %15.1f %11.1f", double(pc.passes()) * ps[i].full() + encodes * text_prism + vae_prism[i],
                  double(pc.passes()) * qs[i].full() + encodes * text_peer + vae_peer[i]);
    std::printf("\n");
  }

  // Memory.
  double hwm = 0;
  for (const json& j : prism_runs) hwm = std::max(hwm, j["vm_hwm_bytes"].get<double>());
  double peer_hwm = 0;
  for (const json& j : peer_runs) peer_hwm = std::max(peer_hwm, j["vm_hwm_bytes"].get<double>());
  const double wb = first["weight_bytes"].get<double>();
  std::printf("\nmemory (the %d-layer checkpoint, up to %dpx): Prism peak RSS %.2f GiB against %.2f GiB of packed "
              "weights "
              "(+%.2f GiB); the peer's peak RSS %.2f GiB\n",
              o.layers, o.sizes.back(), gib(hwm), gib(wb), gib(hwm - wb), gib(peer_hwm));
  if (first.contains("after_load"))
    std::printf("  Prism's resident memory after load: %.2f GiB anonymous + %.2f GiB file-backed; "
                "at the end: %.2f + %.2f GiB\n",
                gib(first["after_load"]["rss_anon_bytes"].get<double>()),
                gib(first["after_load"]["rss_file_bytes"].get<double>()),
                gib(first["at_end"]["rss_anon_bytes"].get<double>()),
                gib(first["at_end"]["rss_file_bytes"].get<double>()));
  return 0;
}

void usage() {
  std::fprintf(stderr,
               "usage: image_bench [--quick] [--layers K] [--text-layers K] [--rounds N] [--passes N] "
               "[--sizes 512,1024] [--caption 128] [--threads 2] [--work-dir DIR] [--no-text] [--no-vae]\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (prism::Status s = prism::select_isa_from_env(std::getenv("PRISM_ISA")); !s.ok()) {
    std::fprintf(stderr, "image_bench: %s\n", s.message().c_str());
    return 2;
  }
  Options o;
  bool sizes_given = false, caption_given = false, layers_given = false, text_layers_given = false;
  bool rounds_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--quick") o.quick = true;
    else if (a == "--layers") { o.layers = std::atoi(next().c_str()); layers_given = true; }
    else if (a == "--text-layers") { o.text_layers = std::atoi(next().c_str()); text_layers_given = true; }
    else if (a == "--rounds") { o.rounds = std::atoi(next().c_str()); rounds_given = true; }
    else if (a == "--passes") o.passes = std::atoi(next().c_str());
    else if (a == "--threads") o.threads = std::atoi(next().c_str());
    else if (a == "--sizes") { o.sizes = parse_int_list(next()); sizes_given = true; }
    else if (a == "--caption") { o.caption = std::atoi(next().c_str()); caption_given = true; }
    else if (a == "--work-dir") o.work_dir = next();
    else if (a == "--no-text") o.text = false;
    else if (a == "--no-vae") o.vae = false;
    else if (a == "--role") o.role = next();
    else if (a == "--model") o.model = next();
    else if (a == "--out") o.out = next();
    else if (a == "--check") o.check = next();
    else if (a == "--ops") o.ops = true;
    else {
      usage();
      return 2;
    }
  }
  if (o.quick) {
    if (!sizes_given) o.sizes = {128, 256};
    if (!caption_given) o.caption = 16;
    if (!layers_given) o.layers = 1;
    if (!text_layers_given) o.text_layers = 2;
    if (!rounds_given) o.rounds = 1;
  }
  bool bad = o.layers < 1 || o.text_layers < 1 || o.rounds < 1 || o.passes < 1 || o.threads < 1 || o.caption < 1 ||
             o.sizes.empty();
  for (int px : o.sizes) bad = bad || px < 16 || px % 16 != 0;
  if (bad) {
    usage();
    return 2;
  }
  prism::set_num_threads(o.threads);
  if (o.role == "transformer") return role_transformer(o);
  if (o.role == "text") return role_text(o);
  if (o.role == "vae") return role_vae(o);
  if (!o.role.empty()) {
    usage();
    return 2;
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  if (o.work_dir.empty()) o.work_dir = (exe.parent_path().parent_path() / "image-bench").string();
  fs::create_directories(o.work_dir);
  return orchestrate(o, exe.string());
}

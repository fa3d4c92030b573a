// linear_int8_bench: Prism's int8 linear kernel (runtime/cpu/linear_int8.h) against oneDNN's
// int8 matmul and oneDNN's f32 matmul, on the same shapes, on the tier PRISM_ISA selects (set
// before any oneDNN call, as tests/test_main does; unset: the CPU's best). Shapes: the
// SmolLM2-360M and Llama-3.2-1B linears. Decode (M = 1, 2, 4, 8) is reported as GB/s of
// weight bytes streamed (int8: 1 byte a weight, f32: 4) and as f32's time over each int8
// path's; prefill (M = 64, 512) as GOP/s (GFLOP/s for f32) and the same time ratio. The ceiling
// is f32 on the same shape, in the same run; a read bandwidth probe is printed for scale.
// Every path takes x already in its input form: f32 for f32, s8 rows with their scales for
// int8 (the per-call quantisation pass is the same for both int8 paths, O(M K)); bias, no
// activation. oneDNN int8 = s8 x s8 matmul with per-N output scales, then the int8 epilogue
// (linear_int8.h's, in place), as linear.cpp runs it.
// Usage: linear_int8_bench [decode|prefill|all] [1] [quick] [only=SHAPE_SUBSTRING]. 1: one thread, timed by its CPU
// clock (the wall clock of a 2-thread run on the shared machine mostly measures the
// neighbours). Each figure is the best of several repetitions, the variants interleaved.
// Never asserts on time.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "bench/bench_timing.h"
#include "runtime/cpu/dnnl_context.h"
#include "runtime/cpu/linear_int8.h"
#include "runtime/isa.h"
#include "runtime/threads.h"

namespace {

using namespace prism;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

int g_rounds = 2;
bench::Timing g_timing{0.25, 3, false};  // `1`: one thread, timed by its CPU clock (bench_timing.h)
std::string g_only;  // only=SUBSTRING: the shapes whose name contains it

double read_bandwidth_gbs() { return g_timing.read_bandwidth_gbs(); }
double best_seconds(const std::function<void()>& fn) { return g_timing.best_seconds(fn); }

// ---- the three paths on one weight ----

// s8 rows and their scales: the rule of linear.cpp (max|v| / 127, round half even).
void quantize_rows(const float* v, int64_t rows, int64_t k, int8_t* q, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(v[r * k + i]));
    const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
    scales[r] = scale;
    for (int64_t i = 0; i < k; ++i)
      q[r * k + i] = int8_t(std::clamp(std::nearbyint(v[r * k + i] / scale), -127.0f, 127.0f));
  }
}

// oneDNN's matmul with weights reordered once to the layout it picks for `rows` (format any),
// one primitive per call shape: f32 (bias fused) or s8 x s8 (per-N output scales).
class OnednnLinear {
 public:
  OnednnLinear(bool int8, const void* w_plain, const float* bias, const std::vector<float>& scales, int64_t k,
               int64_t n)
      : int8_(int8), k_(k), n_(n), scales_(scales) {
    dnnl::engine& eng = cpu::dnnl_engine();
    const dnnl::memory::desc plain({k, n}, int8 ? dt::s8 : dt::f32, dnnl::memory::dims{1, k});
    weights_md_ = make_pd(256, dnnl::memory::desc({k, n}, plain.data_type(), tag::any)).weights_desc();
    weights_ = dnnl::memory(weights_md_, eng);
    dnnl::memory src(plain, eng, const_cast<void*>(w_plain));
    dnnl::reorder(src, weights_).execute(cpu::dnnl_stream(), src, weights_);
    cpu::dnnl_stream().wait();
    if (!int8) bias_ = dnnl::memory({{1, n}, dt::f32, tag::ab}, eng, const_cast<float*>(bias));
  }
  // x: [rows, k] f32 or s8; y: [rows, n] f32.
  void run(const void* x, int64_t rows, float* y) {
    if (rows != rows_) {
      prim_ = dnnl::matmul(make_pd(rows, weights_md_));
      rows_ = rows;
    }
    dnnl::engine& eng = cpu::dnnl_engine();
    std::unordered_map<int, dnnl::memory> args;
    args.emplace(DNNL_ARG_SRC, dnnl::memory({{rows, k_}, int8_ ? dt::s8 : dt::f32, tag::ab}, eng, const_cast<void*>(x)));
    args.emplace(DNNL_ARG_WEIGHTS, weights_);
    args.emplace(DNNL_ARG_DST, dnnl::memory({{rows, n_}, dt::f32, tag::ab}, eng, y));
    if (!int8_) args.emplace(DNNL_ARG_BIAS, bias_);
    prim_.execute(cpu::dnnl_stream(), args);
    cpu::dnnl_stream().wait();
  }
  size_t weight_bytes() const { return size_t(k_ * n_) * (int8_ ? 1 : 4); }

 private:
  dnnl::matmul::primitive_desc make_pd(int64_t rows, const dnnl::memory::desc& w) const {
    const dt src_dt = int8_ ? dt::s8 : dt::f32;
    const dnnl::memory::desc src({rows, k_}, src_dt, tag::ab), dst({rows, n_}, dt::f32, tag::ab);
    const dnnl::memory::desc b = int8_ ? dnnl::memory::desc() : dnnl::memory::desc({1, n_}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (int8_) attr.set_output_scales(1 << 1, scales_);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, w, b, dst), attr, cpu::dnnl_engine());
  }

  bool int8_;
  int64_t k_, n_;
  std::vector<float> scales_;
  dnnl::memory::desc weights_md_;
  dnnl::memory weights_, bias_;
  dnnl::matmul prim_;
  int64_t rows_ = -1;
};

// One linear's weights in the three forms.
struct Layer {
  std::unique_ptr<OnednnLinear> f32, dnnl_int8;
  cpu::Int8Weights ours;
};

struct Operands {
  int64_t k, n;
  std::vector<float> w, b, sw;  // [n, k] f32, [n], [n]
  std::vector<int8_t> wq;       // [n, k]
};

Operands make_operands(int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o{k, n, std::vector<float>(size_t(n * k)), std::vector<float>(size_t(n)), std::vector<float>(size_t(n)),
             std::vector<int8_t>(size_t(n * k))};
  for (float& v : o.w) v = dist(rng);
  for (float& v : o.b) v = dist(rng);
  quantize_rows(o.w.data(), n, k, o.wq.data(), o.sw.data());
  return o;
}

enum Variant { kF32, kDnnlInt8, kOurs, kNumVariants };
const char* const kVariantNames[kNumVariants] = {"f32 dnnl", "int8 dnnl", "int8 ours"};

struct Inputs {
  std::vector<float> x, sx;  // [rows, k], [rows]
  std::vector<int8_t> xq;    // [rows, k]
};

Inputs make_inputs(int64_t rows, int64_t k) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  Inputs in{std::vector<float>(size_t(rows * k)), std::vector<float>(size_t(rows)), std::vector<int8_t>(size_t(rows * k))};
  for (float& v : in.x) v = dist(rng);
  quantize_rows(in.x.data(), rows, k, in.xq.data(), in.sx.data());
  return in;
}

void run_variant(Variant v, Layer& layer, const Operands& o, const Inputs& in, int64_t rows, float* y) {
  switch (v) {
    case kF32: return layer.f32->run(in.x.data(), rows, y);
    case kDnnlInt8:
      layer.dnnl_int8->run(in.xq.data(), rows, y);
      return cpu::int8_kernels().epilogue(y, rows, o.n, in.sx.data(), o.b.data(), ops::Activation::none);
    case kOurs:
      return cpu::int8_kernels().gemm(in.xq.data(), rows, in.sx.data(), layer.ours, o.b.data(),
                                      ops::Activation::none, y);
    case kNumVariants: break;
  }
}

Layer make_layer(const Operands& o, bool with_f32, bool with_int8) {
  Layer l;
  if (with_f32) l.f32 = std::make_unique<OnednnLinear>(false, o.w.data(), o.b.data(), std::vector<float>(), o.k, o.n);
  if (with_int8) {
    l.dnnl_int8 = std::make_unique<OnednnLinear>(true, o.wq.data(), nullptr, o.sw, o.k, o.n);
    l.ours = *cpu::int8_kernels().pack(o.wq.data(), o.sw.data(), o.n, o.k);
  }
  return l;
}

struct Shape {
  const char* name;
  int64_t k, n;
};

const Shape kShapes[] = {
    {"smollm2 960->960", 960, 960},       {"smollm2 960->320", 960, 320},   {"smollm2 960->2560", 960, 2560},
    {"smollm2 2560->960", 2560, 960},     {"llama 2048->2048", 2048, 2048}, {"llama 2048->512", 2048, 512},
    {"llama 2048->8192", 2048, 8192},     {"llama 8192->2048", 8192, 2048},
};

// Decode: each variant cycles through copies of its weights that together exceed the caches
// (L3 is 32 MB here), so the figure is the memory stream, not the cache.
void bench_decode() {
  constexpr double kWorkingSetBytes = 192.0 * (1 << 20);
  const int64_t rows_list[] = {1, 2, 4, 8};
  constexpr int kNumM = 4;
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({"llama3 head 2048->128256", 2048, 128256});
  const double bw0 = read_bandwidth_gbs();
  std::printf("\ndecode, bias, %d thread(s), %s clock: weight GB/s (int8 1 B, f32 4 B a weight), and f32's time"
              " over the variant's (x f32); read bandwidth now %.1f GB/s\n",
              g_timing.thread_cpu_clock ? 1 : num_threads(), g_timing.thread_cpu_clock ? "thread CPU" : "wall", bw0);
  std::printf("%-26s %-10s |", "shape", "variant");
  for (int64_t m : rows_list) std::printf("  M=%ld GB/s  x f32", long(m));
  std::printf("\n");
  for (const Shape& s : shapes) {
    if (std::string(s.name).find(g_only) == std::string::npos) continue;
    const Operands o = make_operands(s.k, s.n, 11);
    const Inputs in = make_inputs(8, s.k);
    std::vector<std::vector<Layer>> sets(kNumVariants);
    for (int v = 0; v < kNumVariants; ++v) {
      const double bytes = double(s.k * s.n) * (v == kF32 ? 4 : 1);
      const int copies = std::max(1, int(std::ceil(kWorkingSetBytes / bytes)));
      for (int c = 0; c < copies; ++c) sets[size_t(v)].push_back(make_layer(o, v == kF32, v != kF32));
    }
    std::vector<float> y(size_t(8 * s.n));
    double sec[kNumVariants][kNumM];
    for (auto& row : sec) std::fill(std::begin(row), std::end(row), 1e30);
    for (int round = 0; round < g_rounds; ++round)
      for (int mi = 0; mi < kNumM; ++mi)
        for (int v = 0; v < kNumVariants; ++v) {
          auto& set = sets[size_t(v)];
          const double t = best_seconds([&] {
                             for (Layer& l : set) run_variant(Variant(v), l, o, in, rows_list[mi], y.data());
                           }) /
                           double(set.size());
          sec[v][mi] = std::min(sec[v][mi], t);
        }
    for (int v = 0; v < kNumVariants; ++v) {
      std::printf("%-26s %-10s |", s.name, kVariantNames[v]);
      for (int mi = 0; mi < kNumM; ++mi) {
        const double bytes = double(s.k * s.n) * (v == kF32 ? 4 : 1);
        std::printf("  %9.1f  x%4.2f", bytes / sec[v][mi] * 1e-9, sec[kF32][mi] / sec[v][mi]);
      }
      std::printf("\n");
    }
  }
  std::printf("read bandwidth at the end: %.1f GB/s\n", read_bandwidth_gbs());
}

void bench_prefill() {
  const int64_t rows_list[] = {64, 512};
  std::printf("\nprefill, bias, %d thread(s), %s clock: GFLOP/s (f32) or GOP/s (int8), and f32's time over the"
              " variant's (x f32)\n",
              g_timing.thread_cpu_clock ? 1 : num_threads(), g_timing.thread_cpu_clock ? "thread CPU" : "wall");
  std::printf("%-26s %-10s |", "shape", "variant");
  for (int64_t m : rows_list) std::printf("  M=%-3ld GOP/s  x f32", long(m));
  std::printf("\n");
  for (const Shape& s : kShapes) {
    if (std::string(s.name).find(g_only) == std::string::npos) continue;
    const Operands o = make_operands(s.k, s.n, 12);
    const Inputs in = make_inputs(512, s.k);
    Layer layer = make_layer(o, true, true);
    std::vector<float> y(size_t(512 * s.n));
    double sec[kNumVariants][2];
    for (auto& row : sec) std::fill(std::begin(row), std::end(row), 1e30);
    for (int round = 0; round < g_rounds; ++round)
      for (int mi = 0; mi < 2; ++mi)
        for (int v = 0; v < kNumVariants; ++v)
          sec[v][mi] = std::min(sec[v][mi], best_seconds([&] { run_variant(Variant(v), layer, o, in, rows_list[mi], y.data()); }));
    for (int v = 0; v < kNumVariants; ++v) {
      std::printf("%-26s %-10s |", s.name, kVariantNames[v]);
      for (int mi = 0; mi < 2; ++mi)
        std::printf("  %11.1f  x%4.2f", 2.0 * double(rows_list[mi] * s.k * s.n) / sec[v][mi] * 1e-9,
                    sec[kF32][mi] / sec[v][mi]);
      std::printf("\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The tier first, before any oneDNN call (oneDNN takes its ISA cap once).
  if (Result<Isa> best = best_isa(); !best.has_value()) {
    std::printf("SKIPPED: %s\n", best.status().message().c_str());
    return 77;
  }
  if (Status s = select_isa_from_env(std::getenv("PRISM_ISA")); !s.ok()) {
    std::printf("SKIPPED (PRISM_ISA=%s): %s\n", std::getenv("PRISM_ISA"), s.message().c_str());
    return 77;
  }
  bool prefill = true, decode = true;
  set_num_threads(0);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "prefill") {
      decode = false;
    } else if (a == "decode") {
      prefill = false;
    } else if (a == "quick") {
      g_timing.reps = 2;
      g_timing.rep_seconds = 0.1;
      g_rounds = 1;
    } else if (a == "1") {
      set_num_threads(1);
      g_timing.thread_cpu_clock = true;
    } else if (a.rfind("only=", 0) == 0) {
      g_only = a.substr(5);
    } else if (a != "all") {
      std::printf("usage: linear_int8_bench [decode|prefill|all] [1] [quick] [only=SHAPE_SUBSTRING]\n");
      return 2;
    }
  }
  std::printf("linear_int8_bench, tier %s, %d thread(s); each figure the best of %d rounds x %d reps of >= %.2f s\n",
              std::string(isa_name(active_isa())).c_str(), g_timing.thread_cpu_clock ? 1 : num_threads(), g_rounds, g_timing.reps,
              g_timing.rep_seconds);
  if (prefill) bench_prefill();
  if (decode) bench_decode();
  return 0;
}

// linear_bench: ops::linear's paths per instruction-set tier. Without PRISM_ISA it runs once
// per tier the CPU supports, each in its own process (bench_tiers.h); with PRISM_ISA, that
// tier only. Per tier, f32, bf16 and int8 on the path the tier takes (runtime/cpu/linear.cpp's
// NOTE table), plus the bf16 alternatives the tier could take: oneDNN's own bf16 matmul where
// oneDNN has one (emulated on avx512, brgemm on avx512_bf16) and the widen kernel on the
// native-bf16 tiers.
//  - prefill (BERT-base layers at M = 4096; SmolLM2-360M and Llama-3.2-1B layers at M = 64
//    and 512): G(FL)OP/s and the fraction of the tier's oneDNN f32 peak (a raw 1024^3 f32
//    matmul, pre-reordered weights) measured in the same process;
//  - decode (the same models' linears and Llama-3's LM head at M = 1, 2, 4, 8): GB/s of packed
//    weight bytes streamed, as a fraction of the read bandwidth (runtime/memory_bandwidth.h)
//    measured in the same process, and the speed-up over f32 at the same M (time ratio).
// Usage: linear_bench [prefill|decode|all] [quick] [1]. quick: fewer repetitions and rounds;
// 1: one thread, timed by its CPU clock (see g_timing). Each figure is the best of
// several repetitions of at least kRepSeconds: the machine is shared and noisy.
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "bench/bench_tiers.h"
#include "bench/bench_timing.h"
#include "runtime/cpu/linear_packed.h"
#include "runtime/isa.h"
#include "runtime/memory_bandwidth.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using namespace prism;
using ops::LinearPath;
using ops::Precision;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

int g_rounds = 3;  // decode: passes over the whole table, best per point

// With `1` the bench runs on one thread and times by that thread's CPU clock: on a shared,
// oversubscribed machine the wall clock mostly measures the neighbours (a 2-thread OpenMP
// call waits for its descheduled thread), while CPU time counts only the time the thread
// ran, i.e. what the kernel streams per core-second. Bandwidth is then measured the same way.
bench::Timing g_timing;

double read_bandwidth_gbs() { return g_timing.read_bandwidth_gbs(); }
double best_seconds(const std::function<void()>& fn) { return g_timing.best_seconds(fn); }

Tensor random_tensor(const Dims& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// oneDNN's raw f32 matmul at M = K = N = n: weights reordered to its preferred layout once,
// src/dst plain; GFLOP/s. The tier's ceiling (oneDNN is capped at the tier's ISA).
double raw_onednn_f32_gflops(int64_t n) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const dnnl::memory::desc src({n, n}, dt::f32, tag::ab), dst({n, n}, dt::f32, tag::ab);
  const dnnl::memory::desc any_w({n, n}, dt::f32, tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any_w, dst), eng);
  dnnl::matmul prim(pd);
  dnnl::memory s(src, eng), w(pd.weights_desc(), eng), d(dst, eng);
  std::memset(s.get_data_handle(), 0, src.get_size());
  std::memset(w.get_data_handle(), 0, pd.weights_desc().get_size());
  const double sec = best_seconds([&] {
    prim.execute(stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, d}});
    stream.wait();
  });
  return 2.0 * n * n * n / sec * 1e-9;
}

// One way to run a linear: a precision on a path.
struct Variant {
  std::string name;
  Precision precision;
  LinearPath path;
  bool prefill;  // also in the prefill table (else decode only)
};

// The tier's own paths first (f32 first: the reference), then the alternatives.
std::vector<Variant> variants_for_tier() {
  const Isa isa = active_isa();
  const LinearPath bf16_path = ops::PackedLinear::default_path(Precision::bf16);
  std::vector<Variant> v = {
      {"f32", Precision::f32, LinearPath::onednn, true},
      {"bf16 " + std::string(ops::linear_path_name(bf16_path)), Precision::bf16, bf16_path, true},
      {"int8 " + std::string(ops::linear_path_name(ops::PackedLinear::default_path(Precision::int8))), Precision::int8,
       ops::PackedLinear::default_path(Precision::int8), true},
  };
  if (isa >= Isa::avx512) v.push_back({"bf16 onednn", Precision::bf16, LinearPath::onednn, isa == Isa::avx512});
  if (bf16_path != LinearPath::bf16_widen)
    v.push_back({"bf16 bf16_widen", Precision::bf16, LinearPath::bf16_widen, true});
  return v;
}

size_t weight_bytes(Precision p, int64_t k, int64_t n) {
  const size_t elem = p == Precision::f32 ? 4 : p == Precision::bf16 ? 2 : 1;
  return size_t(k * n) * elem;
}

std::shared_ptr<ops::PackedLinear> pack(const Variant& v, const Tensor& w, const Tensor& b) {
  Result<std::shared_ptr<ops::PackedLinear>> p = ops::PackedLinear::create(w, b, v.precision, v.path);
  return p.has_value() ? *p : nullptr;
}

struct Shape {
  const char* name;
  int64_t m, k, n;
  ops::Activation act;
};

void bench_prefill(const std::vector<Variant>& variants, double peak) {
  std::vector<Shape> shapes = {
      {"bert qkv/out 768->768", 4096, 768, 768, ops::Activation::none},
      {"bert up 768->3072", 4096, 768, 3072, ops::Activation::none},
      {"bert up 768->3072 +gelu", 4096, 768, 3072, ops::Activation::gelu_erf},
      {"bert down 3072->768", 4096, 3072, 768, ops::Activation::none},
  };
  for (int64_t m : {64, 512}) {
    shapes.push_back({"smollm2 up 960->2560", m, 960, 2560, ops::Activation::none});
    shapes.push_back({"smollm2 down 2560->960", m, 2560, 960, ops::Activation::none});
    shapes.push_back({"llama 2048->2048", m, 2048, 2048, ops::Activation::none});
    shapes.push_back({"llama gate/up 2048->8192", m, 2048, 8192, ops::Activation::none});
    shapes.push_back({"llama down 8192->2048", m, 8192, 2048, ops::Activation::none});
  }
  std::printf("\nprefill, bias: G(FL)OP/s and %% of the oneDNN f32 peak (%.0f GFLOP/s); x f32: time ratio\n", peak);
  std::printf("%-26s %5s |", "shape", "M");
  for (const Variant& v : variants)
    if (v.prefill) std::printf(" %22s", v.name.c_str());
  std::printf("\n");
  for (const Shape& s : shapes) {
    const Tensor x = random_tensor({s.m, s.k}, 1);
    const Tensor w = random_tensor({s.n, s.k}, 2);
    const Tensor b = random_tensor({s.n}, 3);
    std::vector<float> y(size_t(s.m * s.n));
    std::printf("%-26s %5ld |", s.name, long(s.m));
    double f32_sec = 0.0;
    for (const Variant& v : variants) {
      if (!v.prefill) continue;
      const std::shared_ptr<ops::PackedLinear> p = pack(v, w, b);
      if (!p) {
        std::printf(" %22s", "n/a");
        continue;
      }
      const double sec = best_seconds([&] { p->run(x.data<float>(), s.m, s.k, s.act, y.data()); });
      if (v.precision == Precision::f32) f32_sec = sec;
      const double gops = 2.0 * s.m * s.k * s.n / sec * 1e-9;
      std::printf("   %7.1f %4.0f%% x%4.2f", gops, 100 * gops / peak, f32_sec / sec);
    }
    std::printf("\n");
  }
}

// Decode-sized M: a decode step streams every layer's weights once per token, so a linear
// at M = 1..8 is judged as GB/s of weight bytes over the read bandwidth measured in this
// run. Each variant cycles through copies whose sum is far larger than the caches (L3 is
// 32 MB here), or the figure would measure the cache.
void bench_decode(const std::vector<Variant>& variants) {
  constexpr double kWorkingSetBytes = 256.0 * (1 << 20);
  struct DecodeShape {
    const char* name;
    int64_t k, n;
  };
  const DecodeShape shapes[] = {
      {"smollm2 up 960->2560", 960, 2560},         {"smollm2 down 2560->960", 2560, 960},
      {"llama 2048->2048", 2048, 2048},            {"llama gate/up 2048->8192", 2048, 8192},
      {"llama down 8192->2048", 8192, 2048},       {"llama3 head 2048->128256", 2048, 128256},
  };
  const int64_t rows_list[] = {1, 2, 4, 8};
  constexpr int kNumM = 4;
  g_timing.reps = std::min(g_timing.reps, 2);  // the rounds repeat every point anyway
  double bandwidth = read_bandwidth_gbs();
  std::printf("\ndecode, bias, %d thread(s), %s clock: weight GB/s, %% of the read bandwidth (now %.1f GB/s; per"
              " shape the best of %d rounds), x f32: time ratio\n",
              g_timing.thread_cpu_clock ? 1 : num_threads(), g_timing.thread_cpu_clock ? "thread CPU" : "wall", bandwidth, g_rounds);
  std::printf("%-26s %-22s |", "shape", "variant");
  for (int64_t m : rows_list) std::printf("   M=%-2ld GB/s   BW  x f32", long(m));
  std::printf("\n");
  for (const DecodeShape& s : shapes) {
    const Tensor w = random_tensor({s.n, s.k}, 5);
    const Tensor b = random_tensor({s.n}, 6);
    const Tensor x = random_tensor({8, s.k}, 4);
    std::vector<std::vector<std::shared_ptr<ops::PackedLinear>>> sets(variants.size());
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const int copies = std::max(
          1, int(std::ceil(kWorkingSetBytes / double(weight_bytes(variants[vi].precision, s.k, s.n)))));
      for (int c = 0; c < copies; ++c) {
        std::shared_ptr<ops::PackedLinear> p = pack(variants[vi], w, b);
        if (!p) break;
        sets[vi].push_back(std::move(p));
      }
    }
    std::vector<float> y(size_t(8 * s.n));
    // Variants interleaved per M so that each column sees the same machine weather; the
    // bandwidth too is the best of the rounds.
    std::vector<std::array<double, kNumM>> sec(variants.size());
    for (auto& row : sec) row.fill(1e30);
    bandwidth = 0.0;
    for (int round = 0; round < g_rounds; ++round) {
      bandwidth = std::max(bandwidth, read_bandwidth_gbs());
      for (int mi = 0; mi < kNumM; ++mi)
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          if (sets[vi].empty()) continue;
          const int64_t m = rows_list[mi];
          const double t = best_seconds([&] {
                             for (const auto& p : sets[vi]) p->run(x.data<float>(), m, s.k, ops::Activation::none, y.data());
                           }) /
                           double(sets[vi].size());
          sec[vi][size_t(mi)] = std::min(sec[vi][size_t(mi)], t);
        }
    }
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      std::printf("%-26s %-22s |", s.name, variants[vi].name.c_str());
      for (int mi = 0; mi < kNumM; ++mi) {
        if (sets[vi].empty()) {
          std::printf("  %22s", "n/a");
          continue;
        }
        const double gbs = weight_bytes(variants[vi].precision, s.k, s.n) / sec[vi][size_t(mi)] * 1e-9;
        std::printf("  %9.1f %3.0f%% x%4.2f", gbs, 100 * gbs / bandwidth, sec[0][size_t(mi)] / sec[vi][size_t(mi)]);
      }
      std::printf("\n");
    }
  }
  std::printf("read bandwidth at the end: %.1f GB/s\n", read_bandwidth_gbs());
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (std::optional<int> done = bench::run_on_each_tier(argc, argv)) return *done;
  bool prefill = true, decode = true;
  set_num_threads(0);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "prefill") decode = false;
    else if (a == "decode") prefill = false;
    else if (a == "quick") {
      g_timing.reps = 2;
      g_timing.rep_seconds = 0.15;
      g_rounds = 1;
    } else if (a == "1") {
      set_num_threads(1);
      g_timing.thread_cpu_clock = true;
    } else if (a != "all") {
      std::printf("usage: linear_bench [prefill|decode|all] [quick] [1]\n");
      return 2;
    }
  }
  const std::vector<Variant> variants = variants_for_tier();
  std::printf("linear_bench, tier %s: %d thread(s); each figure the best of %d reps of >= %.2f s\n",
              std::string(isa_name(active_isa())).c_str(), g_timing.thread_cpu_clock ? 1 : num_threads(), g_timing.reps,
              g_timing.rep_seconds);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8})
    std::printf("  linear %-4s: %s\n", std::string(ops::precision_name(p)).c_str(), ops::linear_path(p).c_str());
  const double peak = raw_onednn_f32_gflops(1024);
  std::printf("oneDNN f32 peak (raw matmul 1024^3): %.0f GFLOP/s\n", peak);
  if (prefill) bench_prefill(variants, peak);
  if (decode) bench_decode(variants);
  return 0;
}

// linear_bench: ops::linear at the shapes of a BERT-base layer and a 1B Llama layer, in f32,
// bf16 and int8, as fractions of oneDNN's own raw matmul at 1024^3 for the same dtype
// measured in this run (pre-reordered weights; u8 x s8 for int8). Decode-sized M (1..16, the
// shapes of SmolLM2-360M and Llama-3.2-1B layers and LM heads) is reported as GB/s of packed
// weight bytes streamed over the read bandwidth measured in the same run, for oneDNN and
// for our small-M bf16 kernel side by side. Usage: linear_bench [small_m [1]] (1: one
// thread, timed by its CPU clock; see g_thread_cpu_clock). Each figure is the best of several
// repetitions of at least kRepSeconds: the machine is shared and noisy.
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "bench/memory_bandwidth.h"
#include "runtime/arena.h"
#include "runtime/cpu/linear_packed.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using namespace prism;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

double kRepSeconds = 0.3;  // small_m 1: 0.15 (one thread: the rest of the run is long)
int kReps = 4;

// With `small_m 1` the bench runs on one thread and times by that thread's CPU clock: on a
// shared, oversubscribed machine the wall clock mostly measures the neighbours (a 2-thread
// OpenMP call waits for its descheduled thread), while CPU time counts only the time the
// thread ran, i.e. what the kernel streams per core-second. Bandwidth is then measured the
// same way, on one thread.
bool g_thread_cpu_clock = false;

double now_s() {
  if (g_thread_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Read bandwidth (GB/s) of the calling thread alone by now_s(): a streaming sum over 1 GiB,
// best of `passes` (the one-thread twin of bench::measure_read_bandwidth_gbs).
double one_thread_read_bandwidth_gbs(int passes = 5) {
  const int64_t n = (int64_t(1) << 30) / int64_t(sizeof(float));
  std::vector<float> data(size_t(n), 1e-3f);
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int pass = 0; pass < passes; ++pass) {
    const double t0 = now_s();
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 64) {
      a0 = _mm512_add_ps(a0, _mm512_loadu_ps(data.data() + i));
      a1 = _mm512_add_ps(a1, _mm512_loadu_ps(data.data() + i + 16));
      a2 = _mm512_add_ps(a2, _mm512_loadu_ps(data.data() + i + 32));
      a3 = _mm512_add_ps(a3, _mm512_loadu_ps(data.data() + i + 48));
    }
    sink = sink + _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    best = std::max(best, double(n) * sizeof(float) / (now_s() - t0) / 1e9);
  }
  return best;
}

double read_bandwidth_gbs() {
  return g_thread_cpu_clock ? one_thread_read_bandwidth_gbs() : bench::measure_read_bandwidth_gbs(size_t(1) << 30, 3);
}

// Best seconds per call of fn.
constexpr double kDecodeWorkingSetBytes = 512.0 * (1 << 20);

double best_seconds(const std::function<void()>& fn) {
  fn();  // warm: primitive creation, scratch growth, first touch
  double best = 1e30;
  for (int r = 0; r < kReps; ++r) {
    int iters = 0;
    const double t0 = now_s();
    double t = t0;
    do {
      fn();
      ++iters;
      t = now_s();
    } while (t - t0 < kRepSeconds);
    best = std::min(best, (t - t0) / iters);
  }
  return best;
}

Tensor random_tensor(const Dims& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// oneDNN's raw matmul at M = K = N = n: weights reordered to its preferred layout once,
// src/dst plain; GFLOP/s (GOP/s for int8).
double raw_onednn_gops(dt src_dt, dt wei_dt, int64_t n) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const dnnl::memory::desc src({n, n}, src_dt, tag::ab), dst({n, n}, dt::f32, tag::ab);
  const dnnl::memory::desc any_w({n, n}, wei_dt, tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any_w, dst), eng);
  dnnl::matmul prim(pd);
  dnnl::memory s(src, eng), w(pd.weights_desc(), eng), d(dst, eng);
  std::memset(s.get_data_handle(), 1, src.get_size());
  std::memset(w.get_data_handle(), 1, pd.weights_desc().get_size());
  const double sec = best_seconds([&] {
    prim.execute(stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, d}});
    stream.wait();
  });
  return 2.0 * n * n * n / sec * 1e-9;
}

size_t weight_bytes(ops::Precision p, int64_t k, int64_t n) {
  const size_t elem = p == ops::Precision::f32 ? 4 : p == ops::Precision::bf16 ? 2 : 1;
  return size_t(k * n) * elem;
}

struct Shape {
  const char* name;
  int64_t m, k, n;
  ops::Activation act;
};


// Decode-sized M: a decode step streams every layer's weights once per token, so a linear
// at M = 1..16 is judged as GB/s of packed weight bytes over the read bandwidth measured in
// this run. Cycles through copies whose sum is far larger than the caches (L3 is 32 MB), or
// the figure measures the cache. bf16 runs twice on the same weights: through oneDNN
// ("bf16 dnnl") and through the small-M kernel ("bf16 ours"); ops::linear takes the latter
// for M <= cpu::kSmallMMaxRows.
struct DecodeShape {
  const char* name;
  int64_t k, n;
  bool all_precisions;  // else bf16 only (the LM heads: one copy is 100-500 MB)
};

enum class Path { onednn, small_m };

void bench_small_m() {
  constexpr int kRounds = 3;
  kReps = 2;
  const DecodeShape shapes[] = {
      {"smollm2 up 960->2560", 960, 2560, true},
      {"smollm2 down 2560->960", 2560, 960, true},
      {"llama qkv 2048->3072", 2048, 3072, true},
      {"llama gate/up 2048->8192", 2048, 8192, true},
      {"llama down 8192->2048", 8192, 2048, true},
      {"smollm2 head 960->49152", 960, 49152, false},
      {"llama3 head 2048->128256", 2048, 128256, false},
  };
  const int64_t rows_list[] = {1, 2, 4, 8, 16};
  struct Variant { const char* name; ops::Precision p; Path path; };
  const Variant variants[] = {{"f32", ops::Precision::f32, Path::onednn},
                              {"int8", ops::Precision::int8, Path::onednn},
                              {"bf16 dnnl", ops::Precision::bf16, Path::onednn},
                              {"bf16 ours", ops::Precision::bf16, Path::small_m}};
  double bandwidth = read_bandwidth_gbs();
  std::printf("\nsmall M (decode), bias, no activation, %d thread(s), %s clock: packed weight GB/s, and as a"
              " fraction of the read bandwidth (now %.1f GB/s; per shape the best of its rounds)\n",
              num_threads(), g_thread_cpu_clock ? "thread CPU" : "wall", bandwidth);
  std::printf("%-26s %-9s |", "shape", "path");
  for (int64_t m : rows_list) std::printf("   M=%-2ld GB/s  BW", long(m));
  std::printf("\n");
  for (const DecodeShape& s : shapes) {
    const Tensor w = random_tensor({s.n, s.k}, 5);
    const Tensor b = random_tensor({s.n}, 6);
    const Tensor x = random_tensor({16, s.k}, 4);
    // One set of copies per precision (both bf16 paths share theirs); variants interleaved
    // per M so that each column sees the same machine weather.
    std::vector<ops::LinearWeight> layers[3];
    for (const Variant& v : variants) {
      std::vector<ops::LinearWeight>& set = layers[int(v.p)];
      if (!set.empty() || (!s.all_precisions && v.p != ops::Precision::bf16)) continue;
      const int copies = std::max(1, int(std::ceil(kDecodeWorkingSetBytes / weight_bytes(v.p, s.k, s.n))));
      for (int c = 0; c < copies; ++c) set.push_back(*ops::pack_linear(w, b, v.p));
    }
    std::vector<float> y(size_t(16 * s.n));
    // Best over kRounds passes of the whole table, the bandwidth too: a neighbour's burst
    // spoils one pass of a point, rarely all of them.
    double gbs[4][5] = {};
    bandwidth = 0.0;
    for (int round = 0; round < kRounds; ++round) {
      bandwidth = std::max(bandwidth, read_bandwidth_gbs());
      for (int mi = 0; mi < 5; ++mi)
        for (int vi = 0; vi < 4; ++vi) {
          const Variant& v = variants[vi];
          const std::vector<ops::LinearWeight>& set = layers[int(v.p)];
          if (!s.all_precisions && v.p != ops::Precision::bf16) continue;
          const int64_t m = rows_list[mi];
          const double sec = best_seconds([&] {
            for (const ops::LinearWeight& lw : set) {
              if (v.path == Path::small_m) lw.packed->run_small_m(x.data<float>(), m, s.k, ops::Activation::none, y.data());
              else lw.packed->run_onednn(x.data<float>(), m, s.k, ops::Activation::none, y.data());
            }
          }) / double(set.size());
          gbs[vi][mi] = std::max(gbs[vi][mi], weight_bytes(v.p, s.k, s.n) / sec * 1e-9);
        }
    }
    for (int vi = 0; vi < 4; ++vi) {
      if (!s.all_precisions && variants[vi].p != ops::Precision::bf16) continue;
      std::printf("%-26s %-9s |", s.name, variants[vi].name);
      for (int mi = 0; mi < 5; ++mi) std::printf("  %9.1f %3.0f%%", gbs[vi][mi], 100 * gbs[vi][mi] / bandwidth);
      std::printf("\n");
    }
  }
  std::printf("read bandwidth at the end: %.1f GB/s\n", read_bandwidth_gbs());
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  set_num_threads(0);
  if (argc > 1 && std::string(argv[1]) == "small_m") {
    if (argc > 2 && std::string(argv[2]) == "1") {
      set_num_threads(1);
      g_thread_cpu_clock = true;
      kRepSeconds = 0.15;
    }
    bench_small_m();
    return 0;
  }
  std::printf("linear_bench: %d threads; each figure the best of %d reps of >= %.1f s\n\n",
              num_threads(), kReps, kRepSeconds);

  const ops::Precision precisions[] = {ops::Precision::f32, ops::Precision::bf16, ops::Precision::int8};
  double ceiling[3];
  ceiling[0] = raw_onednn_gops(dt::f32, dt::f32, 1024);
  ceiling[1] = raw_onednn_gops(dt::bf16, dt::bf16, 1024);
  ceiling[2] = raw_onednn_gops(dt::u8, dt::s8, 1024);
  const double s8s8 = raw_onednn_gops(dt::s8, dt::s8, 1024);
  std::printf("ceiling: raw oneDNN matmul 1024^3  f32 %.0f GFLOP/s  bf16 %.0f GFLOP/s  u8s8 %.0f GOP/s"
              "  (s8s8 %.0f GOP/s)\n\n", ceiling[0], ceiling[1], ceiling[2], s8s8);

  const Shape shapes[] = {
      {"bert qkv/out 768->768", 4096, 768, 768, ops::Activation::none},
      {"bert up 768->3072 +gelu", 4096, 768, 3072, ops::Activation::gelu_erf},
      {"bert down 3072->768", 4096, 3072, 768, ops::Activation::none},
      {"llama gate/up 2048->8192", 512, 2048, 8192, ops::Activation::none},
      {"llama down 8192->2048", 512, 8192, 2048, ops::Activation::none},
  };
  Arena arena(size_t(64) << 20);
  std::printf("%-26s %6s %6s %6s | %-5s %9s %8s\n", "shape (+bias)", "M", "K", "N", "prec", "G(FL)OP/s", "of peak");
  for (const Shape& s : shapes) {
    const Tensor x = random_tensor({s.m, s.k}, 1);
    const Tensor w = random_tensor({s.n, s.k}, 2);
    const Tensor b = random_tensor({s.n}, 3);
    for (int p = 0; p < 3; ++p) {
      ops::LinearWeight lw = *ops::pack_linear(w, b, precisions[p]);
      const double sec = best_seconds([&] {
        ArenaScope scope(&arena);
        ops::linear(x, lw, s.act);
        arena.reset();
      });
      const double gops = 2.0 * s.m * s.k * s.n / sec * 1e-9;
      std::printf("%-26s %6ld %6ld %6ld | %-5s %9.1f %7.0f%%\n", s.name, long(s.m), long(s.k), long(s.n),
                  std::string(ops::precision_name(precisions[p])).c_str(), gops, 100 * gops / ceiling[p]);
    }
  }

  std::printf("\nbatched ops::matmul (f32)\n%-34s %9s %8s\n", "shape", "GFLOP/s", "of peak");
  struct BatchedShape { const char* name; Dims a, b; bool transpose_b; };
  const BatchedShape batched[] = {
      {"scores [12,512,64] @ [12,512,64]^T", {12, 512, 64}, {12, 512, 64}, true},
      {"context [12,512,512] @ [12,512,64]", {12, 512, 512}, {12, 512, 64}, false},
      {"square [8,512,512] @ [8,512,512]", {8, 512, 512}, {8, 512, 512}, false},
  };
  for (const BatchedShape& s : batched) {
    const Tensor a = random_tensor(s.a, 7), b = random_tensor(s.b, 8);
    const double sec = best_seconds([&] {
      ArenaScope scope(&arena);
      ops::matmul(a, b, {.transpose_b = s.transpose_b});
      arena.reset();
    });
    const int64_t n = s.transpose_b ? s.b[1] : s.b[2];
    const double gflops = 2.0 * s.a[0] * s.a[1] * s.a[2] * n / sec * 1e-9;
    std::printf("%-34s %9.1f %7.0f%%\n", s.name, gflops, 100 * gflops / ceiling[0]);
  }

  bench_small_m();
  return 0;
}

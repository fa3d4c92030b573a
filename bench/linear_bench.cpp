// linear_bench: ops::linear at the shapes of a BERT-base layer and a 1B Llama layer, in f32,
// bf16 and int8, as fractions of oneDNN's own raw matmul at 1024^3 for the same dtype
// measured in this run (pre-reordered weights; u8 x s8 for int8). Decode (M = 1) is
// reported as GB/s of packed weight bytes streamed. Each figure is the best of several
// repetitions of at least kRepSeconds: the machine is shared and noisy.
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
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using namespace prism;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

constexpr double kRepSeconds = 0.3;
constexpr int kReps = 4;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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

}  // namespace

int main() {
  set_num_threads(0);
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

  const double bandwidth = bench::measure_read_bandwidth_gbs();
  std::printf("\ndecode (M = 1) over 512 MB of weight copies: packed weight bytes streamed per second; read bandwidth measured now: %.1f GB/s\n",
              bandwidth);
  std::printf("%-26s %6s %6s | %-5s %9s %9s %8s\n", "shape (+bias)", "K", "N", "prec", "GB/s", "us/call", "of BW");
  for (const Shape& s : {shapes[3], shapes[4]}) {
    const Tensor x = random_tensor({1, s.k}, 4);
    const Tensor w = random_tensor({s.n, s.k}, 5);
    const Tensor b = random_tensor({s.n}, 6);
    for (int p = 0; p < 3; ++p) {
      // Decode streams every layer's weights once per token: cycle through copies whose sum
      // is far larger than the caches (L3 is 32 MB), or the figure measures the cache.
      const double bytes = weight_bytes(precisions[p], s.k, s.n);
      const int copies = std::max(2, int(std::ceil(kDecodeWorkingSetBytes / bytes)));
      std::vector<ops::LinearWeight> layers;
      for (int c = 0; c < copies; ++c) layers.push_back(*ops::pack_linear(w, b, precisions[p]));
      const double sec = best_seconds([&] {
        ArenaScope scope(&arena);
        for (const ops::LinearWeight& lw : layers) ops::linear(x, lw, s.act);
        arena.reset();
      }) / copies;
      const double gbs = bytes / sec * 1e-9;
      std::printf("%-26s %6ld %6ld | %-5s %9.1f %9.1f %7.0f%%\n", s.name, long(s.k), long(s.n),
                  std::string(ops::precision_name(precisions[p])).c_str(), gbs, sec * 1e6,
                  100 * gbs / bandwidth);
    }
  }
  return 0;
}

// Microbenchmark of the pointwise, normalisation, embedding, rope and convolution ops at the
// shapes models run them, and of the sampler's passes over a row of logits. Memory-bound ops
// print GB/s and their fraction of a streaming copy measured in the same run; convolutions
// print GFLOP/s next to oneDNN's own best case (its blocked layouts, inputs already reordered)
// and the blocked path with the per-call reorders that ops::conv* would need if it used it.
// PRISM_ISA=avx2|avx512 runs the kernels of a lower tier than the CPU's best (runtime/isa.h).
// Never a test: figures vary from run to run.
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "bench/memory_bandwidth.h"
#include "engines/generate/sampler.h"
#include "runtime/arena.h"
#include "runtime/isa.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using prism::Arena;
using prism::ArenaScope;
using prism::DType;
using prism::Tensor;
namespace ops = prism::ops;

// Best-of wall time in seconds: warm up, then repeat for ~0.3 s (at least 3 runs).
double time_best(const std::function<void()>& fn) {
  fn();
  double best = 1e30, total = 0;
  for (int i = 0; i < 3 || (total < 0.3 && i < 1000); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

Tensor random_tensor(const prism::Dims& shape, float lo = -3.0f, float hi = 3.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  uint32_t s = 12345;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * float(s >> 8) / float(1 << 24);
  }
  return t;
}


void row(const char* name, const char* shape, double seconds, double bytes, double ceiling_gbs) {
  const double gbs = bytes / seconds / 1e9;
  std::printf("%-20s %-22s %9.3f ms %7.1f GB/s %6.2f\n", name, shape, seconds * 1e3, gbs, gbs / ceiling_gbs);
}

void bench_memory_bound(double ceiling) {
  // Each call allocates its output from an arena, as in a forward pass, reset per call (a
  // fresh heap block per call would time page faults). Inputs live on the heap.
  Arena arena;
  auto timed = [&](const std::function<void()>& fn) {
    return time_best([&] {
      {
        ArenaScope scope(&arena);
        fn();
      }
      arena.reset();
    });
  };
  for (auto [rows, h] : {std::pair<int64_t, int64_t>{4096, 768}, {512, 2048}}) {
    const Tensor x = random_tensor({rows, h}), y = random_tensor({rows, h});
    const Tensor w = random_tensor({h}), b = random_tensor({h});
    char shape[32];
    std::snprintf(shape, sizeof shape, "[%ld, %ld]", long(rows), long(h));
    const double n = double(rows * h), io2 = 8 * n, io3 = 12 * n;
    row("layer_norm", shape, timed([&] { ops::layer_norm(x, w, b, 1e-5f); }), io2, ceiling);
    row("rms_norm", shape, timed([&] { ops::rms_norm(x, w, 1e-5f); }), io2, ceiling);
    row("softmax", shape, timed([&] { ops::softmax(x); }), io2, ceiling);
    row("gelu (erf)", shape, timed([&] { ops::gelu(x, ops::GeluForm::erf); }), io2, ceiling);
    row("gelu (tanh)", shape, timed([&] { ops::gelu(x, ops::GeluForm::tanh); }), io2, ceiling);
    row("silu", shape, timed([&] { ops::silu(x); }), io2, ceiling);
    row("quick_gelu", shape, timed([&] { ops::quick_gelu(x); }), io2, ceiling);
    row("add", shape, timed([&] { ops::add(x, y); }), io3, ceiling);
    row("add (bias row)", shape, timed([&] { ops::add(x, b); }), io2, ceiling);
    row("mul", shape, timed([&] { ops::mul(x, y); }), io3, ceiling);
    Tensor acc = random_tensor({rows, h});
    row("add_ (residual)", shape, timed([&] { ops::add_(acc, y); }), io3, ceiling);
  }
  {
    const Tensor g = random_tensor({512, 8192}), u = random_tensor({512, 8192});
    row("swiglu", "[512, 8192]", timed([&] { ops::swiglu(g, u); }), 12.0 * 512 * 8192, ceiling);
  }
  {
    Tensor q = random_tensor({512, 32, 64});
    std::vector<int32_t> pv(512);
    for (int i = 0; i < 512; ++i) pv[i] = i;
    const Tensor pos = Tensor::from<int32_t>(std::span<const int32_t>(pv), {512});
    const ops::RopeTable table = ops::make_rope_table(ops::rope_inv_freq(64, 10000.0), 4096);
    row("rope (half)", "[512, 32, 64]", timed([&] { ops::apply_rope(q, pos, table, ops::RopeStyle::half); }),
        8.0 * q.numel(), ceiling);
    row("rope (interleaved)", "[512, 32, 64]",
        timed([&] { ops::apply_rope(q, pos, table, ops::RopeStyle::interleaved); }), 8.0 * q.numel(), ceiling);
  }
  {
    const Tensor table = random_tensor({32000, 2048});
    const Tensor table_bf16 = table.to(DType::bf16);
    std::vector<int32_t> iv(4096);
    for (int i = 0; i < 4096; ++i) iv[i] = int32_t((int64_t(i) * 7919) % 32000);
    const Tensor ids = Tensor::from<int32_t>(std::span<const int32_t>(iv), {4096});
    const double n = 4096.0 * 2048;
    row("embedding f32", "4096 of [32000, 2048]", timed([&] { ops::embedding(table, ids); }), 8 * n, ceiling);
    row("embedding bf16", "4096 of [32000, 2048]", timed([&] { ops::embedding(table_bf16, ids); }), 6 * n, ceiling);
    const Tensor table_f16 = table.to(DType::f16);
    row("embedding f16", "4096 of [32000, 2048]", timed([&] { ops::embedding(table_f16, ids); }), 6 * n, ceiling);
  }
  {
    // A prefill chunk of 512 tokens into an i8 paged cache (8 kv heads of 128): absmax,
    // quantisation, and requantisation of the earlier rows of a block when a row raises its scale.
    const int64_t tokens = 512, hkv = 8, d = 128, block = 16;
    const Tensor k = random_tensor({tokens, hkv, d}), v = random_tensor({tokens, hkv, d});
    ops::PagedKv kv;
    kv.k_cache = Tensor::empty({tokens / block, block, hkv, d}, DType::i8);
    kv.v_cache = Tensor::empty({tokens / block, block, hkv, d}, DType::i8);
    kv.k_scale = Tensor::zeros({tokens / block, hkv}, DType::f32);
    kv.v_scale = Tensor::zeros({tokens / block, hkv}, DType::f32);
    std::vector<int32_t> sv(tokens);
    for (int i = 0; i < tokens; ++i) sv[i] = i;
    const Tensor slots = Tensor::from<int32_t>(std::span<const int32_t>(sv), {tokens});
    row("store_kv i8", "[512, 8, 128] x2", timed([&] { ops::store_kv(k, v, slots, kv); }), 2 * 5.0 * double(k.numel()),
        ceiling);
  }
}

// ---- the sampler's passes over a row of logits ------------------------------------------

// One decode step's sample() at Qwen2's vocabulary, per policy; the row is copied back before
// each call (sample() filters in place), a copy timed on its own in the first line.
void bench_sampler() {
  namespace gen = prism::engines::generate;
  const size_t vocab = 152064;
  std::vector<float> logits(vocab);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& l : logits) l = normal(rng);
  std::vector<float> work(vocab);
  auto params = [](float temperature, int top_k, float top_p, float min_p, int top_logprobs) {
    prism::frontends::SamplingParams p;
    p.temperature = temperature, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p;
    p.logprobs = top_logprobs > 0, p.top_logprobs = top_logprobs;
    return p;
  };
  const struct {
    const char* name;
    prism::frontends::SamplingParams params;
  } cases[] = {
      {"greedy", params(0.0f, 0, 1.0f, 0.0f, 0)},
      {"temperature 0.8", params(0.8f, 0, 1.0f, 0.0f, 0)},
      {"top_k 50", params(0.8f, 50, 1.0f, 0.0f, 0)},
      {"top_p 0.9", params(0.8f, 0, 0.9f, 0.0f, 0)},
      {"min_p 0.05", params(0.8f, 0, 1.0f, 0.05f, 0)},
      {"logprobs 5", params(1.0f, 0, 1.0f, 0.0f, 5)},
  };
  std::printf("\n%-20s %-22s %9s\n", "sampler", "row", "best");
  const double copy = time_best([&] { std::copy(logits.begin(), logits.end(), work.begin()); });
  std::printf("%-20s [%zu] %15.1f us\n", "row copy", vocab, copy * 1e6);
  for (const auto& c : cases) {
    gen::SequenceSampler sampler(c.params, 1, {});
    const double t = time_best([&] {
      std::copy(logits.begin(), logits.end(), work.begin());
      sampler.sample(work);
    });
    std::printf("%-20s [%zu] %15.1f us\n", c.name, vocab, t * 1e6);
  }
}

// ---- convolutions ----------------------------------------------------------------------

using dnnl::memory;

struct ConvCase {
  const char* name;
  memory::dims src, wei, dst, stride, padding;  // PyTorch layouts; groups = 1, dilation 1
  double flops() const {
    double f = 2.0;
    for (auto d : dst) f *= double(d);
    for (size_t i = 1; i < wei.size(); ++i) f *= double(wei[i]);
    return f;
  }
};

// oneDNN with layouts of its choosing. Returns {compute only, compute + reorders per call}.
std::pair<double, double> dnnl_blocked(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const bool is_1d = c.src.size() == 3;
  using tag = memory::format_tag;
  const memory::desc src_any(c.src, memory::data_type::f32, tag::any), wei_any(c.wei, memory::data_type::f32, tag::any),
      dst_any(c.dst, memory::data_type::f32, tag::any), bias_md({c.dst[1]}, memory::data_type::f32, tag::x);
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          src_any, wei_any, bias_md, dst_any, c.stride, c.padding, c.padding);
  const dnnl::convolution_forward::primitive_desc pd(d, eng);
  const dnnl::convolution_forward conv(pd);
  memory x_user({c.src, memory::data_type::f32, is_1d ? tag::ncw : tag::nchw}, eng, x.raw_data());
  memory w_user({c.wei, memory::data_type::f32, is_1d ? tag::oiw : tag::oihw}, eng, w.raw_data());
  memory b_mem(bias_md, eng, b.raw_data());
  memory x_mem(pd.src_desc(), eng), w_mem(pd.weights_desc(), eng), y_mem(pd.dst_desc(), eng);
  Tensor y = Tensor::empty(prism::Dims(std::span<const int64_t>(c.dst.data(), c.dst.size())), DType::f32);
  memory y_user({c.dst, memory::data_type::f32, is_1d ? tag::ncw : tag::nchw}, eng, y.raw_data());
  dnnl::reorder(x_user, x_mem).execute(s, x_user, x_mem);
  dnnl::reorder(w_user, w_mem).execute(s, w_user, w_mem);
  s.wait();
  auto run = [&] {
    conv.execute(s, {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_BIAS, b_mem}, {DNNL_ARG_DST, y_mem}});
  };
  const double compute = time_best([&] {
    run();
    s.wait();
  });
  const dnnl::reorder rx(x_user, x_mem), rw(w_user, w_mem), ry(y_mem, y_user);
  const double with_reorders = time_best([&] {
    rx.execute(s, x_user, x_mem);
    rw.execute(s, w_user, w_mem);
    run();
    ry.execute(s, y_mem, y_user);
    s.wait();
  });
  std::printf("    (oneDNN picked src %s, weights %s)\n",
              pd.src_desc() == x_user.get_desc() ? "plain" : "blocked",
              pd.weights_desc() == w_user.get_desc() ? "plain" : "blocked");
  return {compute, with_reorders};
}

void bench_conv() {
  const ConvCase cases[] = {
      {"conv1d whisper conv1", {1, 80, 3000}, {384, 80, 3}, {1, 384, 3000}, {1}, {1}},
      {"conv1d whisper conv2", {1, 384, 3000}, {384, 384, 3}, {1, 384, 1500}, {2}, {1}},
      {"conv2d vit patch16", {1, 3, 224, 224}, {768, 3, 16, 16}, {1, 768, 14, 14}, {16, 16}, {0, 0}},
  };
  std::printf("\n%-22s %12s %14s %24s %26s\n", "conv", "ops:: ms", "ops:: GFLOP/s", "oneDNN blocked GFLOP/s",
              "blocked+reorders GFLOP/s");
  for (const ConvCase& c : cases) {
    const Tensor x = random_tensor(prism::Dims(std::span<const int64_t>(c.src.data(), c.src.size())), -1, 1);
    const Tensor w = random_tensor(prism::Dims(std::span<const int64_t>(c.wei.data(), c.wei.size())), -0.1f, 0.1f);
    const Tensor b = random_tensor({c.wei[0]});
    double t;
    if (c.src.size() == 3)
      t = time_best([&] { ops::conv1d(x, w, b, {.stride = int(c.stride[0]), .padding = int(c.padding[0])}); });
    else
      t = time_best([&] {
        ops::conv2d(x, w, b, {.stride_h = int(c.stride[0]), .stride_w = int(c.stride[1]),
                              .padding_h = int(c.padding[0]), .padding_w = int(c.padding[1])});
      });
    const auto [blocked, blocked_reorder] = dnnl_blocked(c, x, w, b);
    const double f = c.flops() / 1e9;
    std::printf("%-22s %12.3f %14.1f %17.1f (%.2fx) %19.1f (%.2fx)\n", c.name, t * 1e3, f / t, f / blocked,
                t / blocked, f / blocked_reorder, t / blocked_reorder);
  }
  std::printf("(x): ops:: time over that variant's time; below 1 means ops:: is faster.\n");
}

}  // namespace

int main() {
  if (prism::Status s = prism::select_isa_from_env(std::getenv("PRISM_ISA")); !s.ok()) {
    std::fprintf(stderr, "PRISM_ISA: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("kernels: %s, threads: %d\n", std::string(prism::isa_name(prism::active_isa())).c_str(),
              prism::num_threads());
  const double copy_gbs = prism::bench::measure_copy_bandwidth_gbs();
  const double read_gbs = prism::bench::measure_read_bandwidth_gbs();
  std::printf("streaming copy: %.1f GB/s (read + write), streaming read: %.1f GB/s\n\n", copy_gbs, read_gbs);
  std::printf("%-20s %-22s %12s %12s %s\n", "op", "shape", "best", "bandwidth", "of copy");
  bench_memory_bound(copy_gbs);
  bench_sampler();
  bench_conv();
  return 0;
}

// bench/attention_bench.cpp: ops::attention and ops::paged_attention against ceilings measured
// in the same run. (1) Prefill: our flash-style kernel vs the same attention built from oneDNN
// primitives (matmul Q.K^T with the scale as output scale; when causal, a binary_add
// primitive adding a [1, S, S] 0/-inf mask broadcast over heads; softmax_forward; matmul
// P.V). The baseline computes every score even when causal; ours skips masked tiles.
// (2) Decode over a paged cache (f32, bf16, i8 with per-(block, head) scales): K/V bytes read
// per second as a fraction of the streaming read bandwidth from memory_bandwidth.h. (3) Prefill
// speed by head dim: the tiled path's multiples of 8 next to a head dim that runs the scalar
// path. Without PRISM_ISA every tier the CPU can run, each in a process of its own
// (bench_tiers.h); PRISM_ISA=avx2|avx512|avx512_bf16 runs that tier alone (oneDNN capped with it).
// Usage: attention_bench [prefill|decode|dims].
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "bench/bench_tiers.h"
#include "bench/memory_bandwidth.h"
#include "runtime/cpu/attention_kernel.h"
#include "runtime/isa.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using namespace prism;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

template <class Fn>
double best_seconds(int reps, Fn&& fn) {
  fn();  // warm: primitives, scratch, page faults
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Tensor random_f32(const Dims& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor i32(const std::vector<int32_t>& v) {
  return Tensor::from<int32_t>(std::span<const int32_t>(v), {int64_t(v.size())});
}

// The unfused baseline: scores = scale * Q K^T (+ mask), softmax in place, out = P V. Q, K, V
// and out stay in the [S, H, D] layout through strides, as ours read them.
struct OnednnAttention {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul qk, pv;
  dnnl::binary mask_add;
  dnnl::softmax_forward softmax;
  dnnl::memory q_m, k_m, v_m, scores_m, out_m, mask_m;
  bool causal;

  OnednnAttention(int64_t S, int64_t H, int64_t D, bool causal_, float* q, float* k, float* v, float* out)
      : causal(causal_) {
    const dnnl::memory::desc qd({H, S, D}, dt::f32, {D, H * D, 1});
    const dnnl::memory::desc ktd({H, D, S}, dt::f32, {D, 1, H * D});  // K^T by strides
    const dnnl::memory::desc sd({H, S, S}, dt::f32, tag::abc);
    dnnl::primitive_attr attr;
    attr.set_output_scales(0, {float(1.0 / std::sqrt(double(D)))});
    qk = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(qd, ktd, sd), attr, eng));
    if (causal) {
      // A separate binary primitive: oneDNN 2.6 runs a matmul with a broadcast binary post-op
      // on its reference path (100x slower), which would flatter us.
      const dnnl::memory::desc md({1, S, S}, dt::f32, tag::abc);  // broadcast over heads
      mask_add = dnnl::binary(dnnl::binary::primitive_desc(
          dnnl::binary::desc(dnnl::algorithm::binary_add, sd, md, sd), eng));
      mask_m = dnnl::memory(md, eng);
      float* m = static_cast<float*>(mask_m.get_data_handle());
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) m[i * S + j] = j <= i ? 0.0f : -INFINITY;
    }
    softmax = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, sd, 2), eng));
    const dnnl::memory::desc vd({H, S, D}, dt::f32, {D, H * D, 1});
    pv = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(sd, vd, qd), eng));
    q_m = dnnl::memory(qd, eng, q);
    k_m = dnnl::memory(ktd, eng, k);
    v_m = dnnl::memory(vd, eng, v);
    out_m = dnnl::memory(qd, eng, out);
    scores_m = dnnl::memory(sd, eng);
  }

  void run() {
    qk.execute(strm, {{DNNL_ARG_SRC, q_m}, {DNNL_ARG_WEIGHTS, k_m}, {DNNL_ARG_DST, scores_m}});
    if (causal) mask_add.execute(strm, {{DNNL_ARG_SRC_0, scores_m}, {DNNL_ARG_SRC_1, mask_m}, {DNNL_ARG_DST, scores_m}});
    softmax.execute(strm, {{DNNL_ARG_SRC, scores_m}, {DNNL_ARG_DST, scores_m}});
    pv.execute(strm, {{DNNL_ARG_SRC, scores_m}, {DNNL_ARG_WEIGHTS, v_m}, {DNNL_ARG_DST, out_m}});
    strm.wait();
  }
};

void bench_prefill() {
  const int64_t H = 12, D = 64;
  std::printf("prefill attention, batch 1, %lld heads x %lld, f32, %d threads\n", (long long)H, (long long)D,
              num_threads());
  std::printf("%6s %-10s %10s %10s %9s %12s %10s\n", "seq", "mask", "ours ms", "oneDNN ms", "speedup",
              "ours GFLOP/s", "max |diff|");
  for (int64_t S : {512, 2048}) {
    const Tensor q = random_f32({S, H, D}, 1), k = random_f32({S, H, D}, 2), v = random_f32({S, H, D}, 3);
    Tensor base_out = Tensor::empty({S, H, D}, DType::f32);
    const Tensor cu = i32({0, int32_t(S)});
    for (bool causal : {false, true}) {
      OnednnAttention base(S, H, D, causal, q.data<float>(), k.data<float>(), v.data<float>(), base_out.data<float>());
      const int reps = S <= 512 ? 10 : 3;
      Tensor ours;
      // Interleaved rounds so both see the same machine weather.
      double t_ours = 1e30, t_base = 1e30;
      for (int round = 0; round < 2; ++round) {
        t_ours = std::min(t_ours, best_seconds(reps, [&] { ours = ops::attention(q, k, v, {cu, cu, Tensor()}, {.scale = 0.0f, .causal = causal}); }));
        t_base = std::min(t_base, best_seconds(reps, [&] { base.run(); }));
      }
      float diff = 0.0f;
      for (int64_t i = 0; i < ours.numel(); ++i)
        diff = std::max(diff, std::abs(ours.data<float>()[i] - base_out.data<float>()[i]));
      const double flops = 4.0 * double(S) * double(S) * D * H * (causal ? 0.5 : 1.0);
      std::printf("%6lld %-10s %10.2f %10.2f %8.2fx %12.1f %10.2e\n", (long long)S, causal ? "causal" : "none",
                  t_ours * 1e3, t_base * 1e3, t_base / t_ours, flops / t_ours / 1e9, diff);
    }
  }
}

// Causal prefill of one 512-token sequence, 12 heads, at head dims on and off the tiled path.
void bench_head_dims() {
  const int64_t S = 512, H = 12;
  std::printf("\nprefill attention by head dim: seq %lld causal, %lld heads, f32\n", (long long)S, (long long)H);
  std::printf("%6s %-7s %10s %12s\n", "dim", "path", "ms", "GFLOP/s");
  const Tensor cu = i32({0, int32_t(S)});
  for (int64_t D : {32, 64, 68, 72, 80, 128}) {
    const Tensor q = random_f32({S, H, D}, 1), k = random_f32({S, H, D}, 2), v = random_f32({S, H, D}, 3);
    const bool tiled = cpu::attention_fast_path(int(D));
    const double t = best_seconds(tiled ? 10 : 2, [&] { ops::attention(q, k, v, {cu, cu, Tensor()}); });
    const double flops = 4.0 * double(S) * double(S) * D * H * 0.5;
    std::printf("%6lld %-7s %10.2f %12.1f\n", (long long)D, tiled ? "tiled" : "scalar", t * 1e3, flops / t / 1e9);
  }
}

void bench_decode(double bandwidth_gbs) {
  const int num_seqs = 32, hq = 32, hkv = 8, D = 128, bs = 16;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> ctx_dist(1024, 4096);
  std::vector<int32_t> ctx(num_seqs);
  int total_blocks = 0, max_blocks = 0;
  for (int& c : ctx) {
    c = ctx_dist(rng);
    total_blocks += (c + bs - 1) / bs;
    max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
  }
  std::vector<int32_t> ids(total_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(size_t(num_seqs) * max_blocks, 0);
  int next = 0;
  for (int s = 0; s < num_seqs; ++s)
    for (int b = 0; b < (ctx[s] + bs - 1) / bs; ++b) table[s * max_blocks + b] = ids[next++];
  const int64_t tokens = std::accumulate(ctx.begin(), ctx.end(), int64_t(0));
  std::vector<int32_t> cu_q(num_seqs + 1);
  std::iota(cu_q.begin(), cu_q.end(), 0);
  const Tensor q = random_f32({num_seqs, hq, D}, 8);

  std::printf("\ndecode paged attention: %d seqs x 1 query, context %d..%d (%lld tokens), %d q / %d kv heads x %d, block %d\n",
              num_seqs, *std::min_element(ctx.begin(), ctx.end()), *std::max_element(ctx.begin(), ctx.end()),
              (long long)tokens, hq, hkv, D, bs);
  std::printf("%-6s %10s %10s %10s %12s\n", "cache", "ms", "K/V MB", "GB/s", "of read BW");
  for (DType dtype : {DType::f32, DType::bf16, DType::i8}) {
    ops::PagedKv kv;
    kv.k_cache = Tensor::empty({total_blocks, bs, hkv, D}, dtype);
    kv.v_cache = Tensor::empty({total_blocks, bs, hkv, D}, dtype);
    for (Tensor* c : {&kv.k_cache, &kv.v_cache}) {  // cheap deterministic fill, in parallel
      const int64_t n = c->numel();
      void* raw = c->raw_data();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const float x = float((uint32_t(i) * 2654435761u) >> 20) / 4096.0f - 0.5f;
        if (dtype == DType::f32) static_cast<float*>(raw)[i] = x;
        else if (dtype == DType::bf16) static_cast<bf16*>(raw)[i] = f32_to_bf16(x);
        else static_cast<int8_t*>(raw)[i] = int8_t(std::lround(x * 254.0f));
      }
    }
    if (dtype == DType::i8) {  // one scale per (block, kv head), as store_kv leaves them
      kv.k_scale = Tensor::empty({total_blocks, hkv}, DType::f32);
      kv.v_scale = Tensor::empty({total_blocks, hkv}, DType::f32);
      std::fill_n(kv.k_scale.data<float>(), kv.k_scale.numel(), 0.5f / 127.0f);
      std::fill_n(kv.v_scale.data<float>(), kv.v_scale.numel(), 0.5f / 127.0f);
    }
    kv.block_tables = Tensor::from<int32_t>(std::span<const int32_t>(table), {num_seqs, max_blocks});
    kv.context_lens = i32(ctx);
    const Tensor cu = i32(cu_q);
    const double t = best_seconds(10, [&] { ops::paged_attention(q, cu, kv); });
    // Scales are 1/(bs * D) of the i8 bytes: counted, for honesty.
    const double scale_bytes = dtype == DType::i8 ? 2.0 * total_blocks * hkv * sizeof(float) : 0.0;
    const double bytes = double(tokens) * hkv * D * 2 * dtype_size(dtype) + scale_bytes;
    const double gbs = bytes / t / 1e9;
    std::printf("%-6s %10.2f %10.0f %10.1f %11.0f%%\n", std::string(dtype_name(dtype)).c_str(), t * 1e3,
                bytes / 1e6, gbs, 100.0 * gbs / bandwidth_gbs);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
  if (std::optional<int> done = prism::bench::run_on_each_tier(argc, argv)) return *done;
  std::printf("instruction-set tier: %s\n", std::string(prism::isa_name(prism::active_isa())).c_str());
  const std::string only = argc > 1 ? argv[1] : "";
  const double bw = prism::bench::measure_read_bandwidth_gbs();
  std::printf("memory read bandwidth (1 GiB streaming sum, best of 5): %.1f GB/s\n\n", bw);
  if (only.empty() || only == "prefill") bench_prefill();
  if (only.empty() || only == "decode") bench_decode(bw);
  if (only.empty() || only == "dims") bench_head_dims();
  std::printf("\nmemory read bandwidth after: %.1f GB/s\n", prism::bench::measure_read_bandwidth_gbs());
  return 0;
}

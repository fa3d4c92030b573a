// z_image_block_bench: ONE Z-Image transformer block at the real width (dim 3840, 30 heads of
// 128, FFN 10240, adaLN), bf16 linears, at the token counts of a 512^2 and a 1024^2 image
// (1024 and 4096 image tokens + a 128-token caption), with each fused kernel of
// models::ZImageKernels off ("before") and on ("after"), all in the same process, so the
// figures share one machine state. Also, per change, the ops it replaces against the fused op
// on the block's real tensors (where the difference is not buried under the GEMMs), and
// begin() with and without the static plan.
// Figures: seconds per block and GFLOP/s (the block's matmul and attention flops, as
// models::z_image_flops counts them), as a fraction of oneDNN's bf16 matmul peak (a raw
// 2048^3 bf16 matmul, weights pre-reordered) measured in the same run.
// The weights are random (N(0, 0.02^2)), written once as a one-layer, no-refiner checkpoint
// in the real layout to a temporary folder and loaded as a deployment would.
// Usage: OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE z_image_block_bench [512|1024|all] [reps] [blocks|attention]
// (blocks: the whole-block table only; attention: f32 vs bf16 attention only)
// (the active tier: PRISM_ISA may force one). Never a test: it asserts nothing.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "bench/bench_timing.h"
#include "configs/z_image_config.h"
#include "formats/safetensors.h"
#include "models/z_image/z_image.h"
#include "runtime/arena.h"
#include "runtime/dtype.h"
#include "runtime/isa.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using namespace prism;
using models::ZImageKernels;

bench::Timing g_timing{.rep_seconds = 0.0, .reps = 3};

double best_seconds(const std::function<void()>& fn) { return g_timing.best_seconds(fn); }

// oneDNN's bf16 matmul at M = K = N = n (bf16 in, f32 out), weights in its preferred layout:
// the tier's bf16 GEMM ceiling, GFLOP/s.
double onednn_bf16_peak_gflops(int64_t n) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const dnnl::memory::desc src({n, n}, dt::bf16, tag::ab), dst({n, n}, dt::f32, tag::ab);
  const dnnl::memory::desc any_w({n, n}, dt::bf16, tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any_w, dst), eng);
  dnnl::matmul prim(pd);
  dnnl::memory s(src, eng), w(pd.weights_desc(), eng), d(dst, eng);
  std::memset(s.get_data_handle(), 0, src.get_size());
  std::memset(w.get_data_handle(), 0, pd.weights_desc().get_size());
  const bench::Timing t{.rep_seconds = 0.5, .reps = 3};
  const double sec = t.best_seconds([&] {
    prim.execute(stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, d}});
    stream.wait();
  });
  return 2.0 * double(n) * n * n / sec * 1e-9;
}

// Random values N(0, scale^2) (a fast generator: 180M of them).
void fill_normal(float* p, int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
}

Tensor random_bf16(const Dims& shape, uint64_t seed, float scale, float offset = 0.0f) {
  const int64_t n = shape.numel();
  std::vector<float> f(static_cast<size_t>(n));
  fill_normal(f.data(), n, seed, scale);
  Tensor t = Tensor::empty(shape, DType::bf16);
  bf16* p = t.data<bf16>();
  for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(f[size_t(i)] + offset);
  return t;
}

// A one-layer, no-refiner Z-Image transformer folder at the real width.
std::string write_checkpoint() {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/z_image_block_bench-" +
                          std::to_string(getpid());
  std::filesystem::create_directories(dir);
  configs::ZImageConfig c;
  const int64_t d = c.dim, inter = c.ffn_hidden(), hd = c.head_dim(), a = c.adaln_dim(), patch = c.patch_features();
  std::ofstream(dir + "/config.json")
      << R"({"_class_name": "ZImageTransformer2DModel", "all_f_patch_size": [1], "all_patch_size": [2],
            "axes_dims": [32, 48, 48], "axes_lens": [1024, 512, 512], "cap_feat_dim": 2560, "dim": 3840,
            "in_channels": 16, "n_heads": 30, "n_kv_heads": 30, "n_layers": 1, "n_refiner_layers": 0,
            "norm_eps": 1e-05, "qk_norm": true, "rope_theta": 256.0, "t_scale": 1000.0})";
  uint64_t seed = 1;
  std::vector<std::pair<std::string, Tensor>> w;
  auto lin = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    w.emplace_back(name + ".weight", random_bf16({out, in}, seed++, 0.02f));
    if (bias) w.emplace_back(name + ".bias", random_bf16({out}, seed++, 0.02f));
  };
  auto norm = [&](const std::string& name, int64_t n) { w.emplace_back(name, random_bf16({n}, seed++, 0.1f, 1.0f)); };
  lin("all_x_embedder.2-1", d, patch, true);
  lin("t_embedder.mlp.0", 1024, 256, true);
  lin("t_embedder.mlp.2", a, 1024, true);
  norm("cap_embedder.0.weight", c.cap_feat_dim);
  lin("cap_embedder.1", d, c.cap_feat_dim, true);
  w.emplace_back("x_pad_token", random_bf16({1, d}, seed++, 0.02f));
  w.emplace_back("cap_pad_token", random_bf16({1, d}, seed++, 0.02f));
  const std::string p = "layers.0.";
  for (const char* n : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"}) norm(p + n + ".weight", d);
  norm(p + "attention.norm_q.weight", hd);
  norm(p + "attention.norm_k.weight", hd);
  for (const char* n : {"attention.to_q", "attention.to_k", "attention.to_v", "attention.to_out.0"}) lin(p + n, d, d, false);
  lin(p + "feed_forward.w1", inter, d, false);
  lin(p + "feed_forward.w3", inter, d, false);
  lin(p + "feed_forward.w2", d, inter, false);
  lin(p + "adaLN_modulation.0", 4 * d, a, true);
  lin("all_final_layer.2-1.adaLN_modulation.1", d, a, true);
  lin("all_final_layer.2-1.linear", patch, d, true);
  const Status s = formats::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", w);
  PRISM_CHECK_MSG(s.ok(), s.to_string().c_str());
  return dir;
}

// One row: a side x side image (latent side / 8) and a 128-token caption.
std::vector<models::ZImageRow> make_rows(const configs::ZImageConfig& c, int64_t side) {
  const int64_t lat = side / 8;
  Tensor x = Tensor::empty({c.in_channels, 1, lat, lat}, DType::f32);
  fill_normal(x.data<float>(), x.numel(), 7, 1.0f);
  Tensor cap = Tensor::empty({128, c.cap_feat_dim}, DType::f32);
  fill_normal(cap.data<float>(), cap.numel(), 8, 1.0f);
  return {{x, 0.3f, cap}};
}

Tensor ones(const Dims& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 1.0f;
  return t;
}

struct Variant {
  const char* name;
  ZImageKernels kernels;
};

// The block with each change added in turn: "before" is every switch off.
const Variant kVariants[] = {
    {"before (all off)", {.qk_norm_rope = false, .segmented_norms = false, .static_plan = false, .bf16_attention = false}},
    {"+ qk_norm_rope", {.qk_norm_rope = true, .segmented_norms = false, .static_plan = false, .bf16_attention = false}},
    {"+ segmented_norms", {.qk_norm_rope = true, .segmented_norms = true, .static_plan = false, .bf16_attention = false}},
    {"+ static_plan", {.qk_norm_rope = true, .segmented_norms = true, .static_plan = true, .bf16_attention = false}},
    {"after (+ bf16 attn)", {.qk_norm_rope = true, .segmented_norms = true, .static_plan = true, .bf16_attention = true}},
};
constexpr size_t kAfter = std::size(kVariants) - 1;

void bench_resolution(models::ZImageTransformer& model, int64_t side, double peak, int reps, const std::string& mode) {
  const bool attention_only = mode == "attention";
  const configs::ZImageConfig& c = model.config();
  const std::vector<models::ZImageRow> rows = make_rows(c, side);
  const int64_t image_tokens = (side / 16) * (side / 16), t = image_tokens + 128;
  const double d = double(c.dim), inter = double(c.ffn_hidden());
  const double block_flops = 2.0 * (double(t) * (4 * d * d + 3 * d * inter) + 2.0 * double(t) * t * d);
  std::printf("\n-- %lldx%lld: %lld tokens (%lld image + 128 caption), %.1f GFLOP per block --\n", (long long)side,
              (long long)side, (long long)t, (long long)image_tokens, block_flops * 1e-9);

  // The whole block, the variants interleaved rep by rep (the machine's load drifts), in
  // forward order on even reps and reversed on odd ones (so neither side always runs first).
  std::vector<double> best(std::size(kVariants), 1e30), begin_best(std::size(kVariants), 1e30);
  Arena arena;
  for (int r = 0; r < (attention_only ? 0 : reps); ++r)
    for (size_t i = 0; i < std::size(kVariants); ++i) {
      const size_t v = r % 2 == 0 ? i : std::size(kVariants) - 1 - i;
      model.set_kernels(kVariants[v].kernels);
      arena.reset();
      ArenaScope scope(&arena);
      double t0 = g_timing.now();
      std::unique_ptr<models::ZImageState> st = model.begin(rows);
      begin_best[v] = std::min(begin_best[v], g_timing.now() - t0);
      t0 = g_timing.now();
      model.run_layers(*st, 0, 1);
      best[v] = std::min(best[v], g_timing.now() - t0);
    }
  std::printf("%-20s %10s %9s %8s %12s\n", "block", "s/block", "GFLOP/s", "of peak", "begin() ms");
  for (size_t v = 0; v < std::size(kVariants); ++v)
    std::printf("%-20s %10.4f %9.1f %7.1f%% %12.2f\n", kVariants[v].name, best[v], block_flops / best[v] * 1e-9,
                100.0 * block_flops / best[v] * 1e-9 / peak, 1e3 * begin_best[v]);
  std::printf("block speed-up, after vs before: %.3fx; bf16 attention vs f32 attention: %.3fx\n", best[0] / best[kAfter],
              best[kAfter - 1] / best[kAfter]);
  if (mode == "blocks") return;

  // The ops each change replaces, on the block's real tensors.
  const int64_t heads = c.n_heads, hd = c.head_dim();
  Tensor qkv = Tensor::empty({t, 3 * heads, hd}, DType::f32);  // [T, 3 H, D]: the packed QKV output
  fill_normal(qkv.data<float>(), qkv.numel(), 9, 1.0f);
  const Tensor wq = ones({hd}), positions = [&] {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < t; ++i) p.push_back(int32_t(i % 1024));
    return Tensor::from<int32_t>(p, {t});
  }();
  const ops::RopeTable rope = ops::make_rope_table(ops::rope_inv_freq(int(hd), 256.0), 1024);
  Tensor x = Tensor::empty({t, c.dim}, DType::f32), y = Tensor::empty({t, c.dim}, DType::f32);
  fill_normal(x.data<float>(), x.numel(), 10, 1.0f);
  fill_normal(y.data<float>(), y.numel(), 11, 1.0f);
  const Tensor w = ones({1, c.dim}), cu = Tensor::from<int32_t>({0, int32_t(t)}, {2});
  Arena scratch;  // the ops' outputs, reset per call
  ArenaScope scope(&scratch);
  const double qk_before = best_seconds([&] {
    scratch.reset();
    for (int64_t part = 0; part < 2; ++part) {
      Tensor x = ops::rms_norm(qkv.slice(1, part * heads, (part + 1) * heads), wq, 1e-5f);
      ops::apply_rope(x, positions, rope, ops::RopeStyle::interleaved);
    }
  });
  const double qk_after = best_seconds([&] {
    for (int64_t part = 0; part < 2; ++part) {
      Tensor x = qkv.slice(1, part * heads, (part + 1) * heads);
      ops::rms_norm_rope_(x, wq, 1e-5f, positions, rope, ops::RopeStyle::interleaved);
    }
  });
  // Per block: two pre-norms (each a norm into a fresh tensor, then the row copy) and two
  // gated residuals (a norm into a fresh tensor, then add_).
  const double norms_before = best_seconds([&] {
    scratch.reset();
    for (int i = 0; i < 2; ++i) {
      Tensor out = Tensor::empty({t, c.dim}, DType::f32);
      out.copy_from(ops::rms_norm(x, w.select(0, 0), 1e-5f));
      ops::add_(x, ops::rms_norm(y, w.select(0, 0), 1e-5f));
    }
  });
  const double norms_after = best_seconds([&] {
    scratch.reset();
    for (int i = 0; i < 2; ++i) {
      const Tensor out = ops::rms_norm_segments(x, w, cu, 1e-5f);
      ops::add_rms_norm_(x, y, w, cu, 1e-5f);
    }
  });
  // Where the block's time goes: its linears (bf16, packed as the model packs them) and its
  // attention, each alone at this token count.
  {
    const int64_t dm = c.dim, in = c.ffn_hidden();
    struct Lin {
      const char* name;
      int64_t out, in;
    };
    const Lin lins[] = {{"to_qkv [3 dim, dim]", 3 * dm, dm}, {"to_out [dim, dim]", dm, dm},
                        {"w1|w3 [2 I, dim]", 2 * in, dm}, {"w2 [dim, I]", dm, in}};
    std::printf("%-44s %10s %9s %8s\n", "breakdown (each alone)", "ms", "GFLOP/s", "of peak");
    double total = 0;
    for (const Lin& l : lins) {
      if (attention_only) break;
      ArenaScope heap(nullptr);  // the weight and the input outlive the scratch resets
      Tensor wt = Tensor::empty({l.out, l.in}, DType::f32);
      fill_normal(wt.data<float>(), wt.numel(), 12, 0.02f);
      Result<ops::LinearWeight> packed = ops::pack_linear(wt, Tensor(), ops::Precision::bf16);
      PRISM_CHECK(packed.has_value());
      Tensor in_x = Tensor::empty({t, l.in}, DType::f32);
      fill_normal(in_x.data<float>(), in_x.numel(), 13, 1.0f);
      const double sec = best_seconds([&] {
        scratch.reset();
        ArenaScope scope(&scratch);
        (void)ops::linear(in_x, *packed);
      });
      const double fl = 2.0 * double(t) * double(l.out) * double(l.in);
      total += sec;
      std::printf("%-44s %10.1f %9.1f %7.1f%%\n", l.name, 1e3 * sec, fl / sec * 1e-9, 100.0 * fl / sec * 1e-9 / peak);
    }
    const Tensor q = qkv.slice(1, 0, heads), k = qkv.slice(1, heads, 2 * heads), v = qkv.slice(1, 2 * heads, 3 * heads);
    // f32 and bf16 attention interleaved (the machine's load drifts), best of each.
    double att = 1e30, att_bf16 = 1e30;
    for (int r = 0; r < 2; ++r) {
      att = std::min(att, best_seconds([&] {
                       scratch.reset();
                       (void)ops::attention(q, k, v, {cu, cu, Tensor()}, {.causal = false});
                     }));
      att_bf16 = std::min(att_bf16, best_seconds([&] {
                            scratch.reset();
                            (void)ops::attention(q, k, v, {cu, cu, Tensor()},
                                                 {.causal = false, .precision = ops::AttentionPrecision::bf16});
                          }));
    }
    const double att_fl = 4.0 * double(t) * double(t) * double(dm);
    total += att;
    std::printf("%-44s %10.1f %9.1f %7.1f%%\n", "attention (f32)", 1e3 * att, att_fl / att * 1e-9,
                100.0 * att_fl / att * 1e-9 / peak);
    std::printf("%-44s %10.1f %9.1f %7.1f%%  (%.2fx f32)\n", "attention (bf16)", 1e3 * att_bf16,
                att_fl / att_bf16 * 1e-9, 100.0 * att_fl / att_bf16 * 1e-9 / peak, att / att_bf16);
    std::printf("attention path: %s\n", ops::attention_path().c_str());
    std::printf("%-44s %10.1f ms of %.1f ms per block\n", "sum of the above (f32 attention)", 1e3 * total,
                1e3 * best[kAfter - 1]);
  }
  std::printf("%-44s %10s %10s %8s %9s\n", "ops per block", "before ms", "after ms", "speed-up", "of block");
  std::printf("%-44s %10.3f %10.3f %7.2fx %8.2f%%\n", "q,k: rms_norm + apply_rope -> rms_norm_rope_", 1e3 * qk_before,
              1e3 * qk_after, qk_before / qk_after, 100.0 * (qk_before - qk_after) / best[0]);
  std::printf("%-44s %10.3f %10.3f %7.2fx %8.2f%%\n", "adaLN norms: per row + copy/add_ -> segments",
              1e3 * norms_before, 1e3 * norms_after, norms_before / norms_after,
              100.0 * (norms_before - norms_after) / best[0]);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a long run: show each table as it is done
  if (Status s = select_isa_from_env(std::getenv("PRISM_ISA")); !s.ok()) {
    std::printf("SKIPPED: %s\n", s.message().c_str());
    return 77;
  }
  const std::string which = argc > 1 ? argv[1] : "all";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string mode = argc > 3 ? argv[3] : "";
  std::printf("z_image_block_bench: tier %s, %d threads, bf16 linears (%s)\n", std::string(isa_name(active_isa())).c_str(),
              num_threads(), ops::linear_path(ops::Precision::bf16).c_str());
  const double peak = onednn_bf16_peak_gflops(2048);
  std::printf("oneDNN bf16 matmul peak (2048^3): %.1f GFLOP/s\n", peak);
  const std::string dir = write_checkpoint();
  Result<std::unique_ptr<models::ZImageTransformer>> model = models::load_z_image_transformer(dir, ops::Precision::bf16);
  std::filesystem::remove_all(dir);
  if (!model) {
    std::printf("load failed: %s\n", model.status().to_string().c_str());
    return 1;
  }
  if (which == "512" || which == "all") bench_resolution(**model, 512, peak, reps, mode);
  if (which == "1024" || which == "all") bench_resolution(**model, 1024, peak, reps, mode);
  return 0;
}

// Parity of the Z-Image transformer (models/z_image) with tests/reference/z_image_transformer.py.
// The generator writes a tiny random ZImageTransformer2DModel in the real layout
// (model_index.json + transformer/ with the real config keys and parameter names; dim 64, two
// heads of 32 = axes_dims [8, 12, 12], two layers, one refiner layer each, cap_feat_dim 48) and
// float64 outputs for one batch of two rows: a 7-token caption (padded to 32) with an 8 x 12
// latent (24 tokens, padded to 32), and a 64-token caption with a 16 x 16 latent (64 tokens,
// no padding). This test loads the directory as a deployment would and runs the batch as one
// flat pass: f32 against the 1e-4 bar, bf16 and int8 linears against derived bounds; the
// begin / run_blocks / end split; the Denoiser's conventions (sigma -> 1 - sigma, velocity =
// -output); each row alone against its row in the batch; the real head_dim (128) with edge
// rows; what the caller's arena holds; the flops formula; load errors.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/file.h"
#include "configs/z_image_config.h"
#include "formats/safetensors.h"
#include "models/z_image/z_image.h"
#include "runtime/arena.h"
#include "runtime/ops.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism {
namespace {

using models::ZImageRow;
using models::ZImageTransformer;
using ops::Precision;

constexpr char kScript[] = "z_image_transformer.py";
constexpr int kRows = 2;

enum class Layout { tiny, bf16_sharded, head128 };

Result<std::string> generated(Layout layout = Layout::tiny) {
  switch (layout) {
    case Layout::bf16_sharded:
      return test::generate_reference(kScript, "z_image_bf16_sharded", "--weight-dtype bf16 --max-shard-bytes 100000");
    case Layout::head128: return test::generate_reference(kScript, "z_image_head128", "--layout head128");
    case Layout::tiny: break;
  }
  return test::generate_reference(kScript, "z_image_f32");
}

struct Reference {
  std::vector<Tensor> x, cap, out, unified;  // per row
  Tensor t, sigma;                           // [2] f32
  std::vector<ZImageRow> rows() const {
    std::vector<ZImageRow> r;
    for (int b = 0; b < kRows; ++b) r.push_back({x[b], t.data<float>()[b], cap[b]});
    return r;
  }
};

Result<Reference> read_reference(const std::string& dir) {
  PRISM_ASSIGN_OR_RETURN(auto file, test::open_reference(dir));
  Reference r;
  PRISM_ASSIGN_OR_RETURN(r.t, file->get("t"));
  PRISM_ASSIGN_OR_RETURN(r.sigma, file->get("sigma"));
  for (int b = 0; b < kRows; ++b) {
    const std::string n = std::to_string(b);
    PRISM_ASSIGN_OR_RETURN(Tensor x, file->get("x_" + n));
    PRISM_ASSIGN_OR_RETURN(Tensor cap, file->get("cap_" + n));
    PRISM_ASSIGN_OR_RETURN(Tensor out, file->get("out_" + n));
    PRISM_ASSIGN_OR_RETURN(Tensor unified, file->get("unified_" + n));
    r.x.push_back(x);
    r.cap.push_back(cap);
    r.out.push_back(out);
    r.unified.push_back(unified);
  }
  return r;
}

struct Loaded {
  std::string dir;
  std::unique_ptr<ZImageTransformer> model;
  Reference ref;
};

Result<Loaded> load(Precision precision, Layout layout = Layout::tiny, bool from_folder = false) {
  Loaded l;
  PRISM_ASSIGN_OR_RETURN(l.dir, generated(layout));
  PRISM_ASSIGN_OR_RETURN(l.model,
                         models::load_z_image_transformer(from_folder ? l.dir + "/transformer" : l.dir, precision));
  PRISM_ASSIGN_OR_RETURN(l.ref, read_reference(l.dir));
  return l;
}

void report(const std::string& tag, const std::string& what, const std::string& value) {
  std::cout << "[ parity   ] " << tag << " " << what << ": " << value << "\n";
  ::testing::Test::RecordProperty(tag + " " + what, value);
}

// The worst row's error.
test::ErrorStats worst(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  test::ErrorStats w;
  for (size_t b = 0; b < want.size(); ++b) {
    EXPECT_EQ(got[b].shape(), want[b].shape()) << "row " << b;
    if (got[b].shape() != want[b].shape()) continue;
    const test::ErrorStats e = test::compare(got[b], want[b]);
    if (e.max_abs_error >= w.max_abs_error) w = e;
  }
  return w;
}

// NOTE: the reference is float64 on the stored weights, with the same float32 sinusoid and
// RoPE arguments, so the f32 error is the C++ side's float32 rounding through four blocks:
// ~1e-6 of outputs that reach ~3.5. The bar is 1e-4 absolute.
constexpr double kF32MaxAbs = 1e-4;

TEST(ZImageTransformer, F32MatchesTheReference) {
  auto l = load(Precision::f32);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  const std::vector<Tensor> out = l->model->forward(l->ref.rows());
  ASSERT_EQ(out.size(), size_t(kRows));
  const test::ErrorStats e = worst(out, l->ref.out);
  report("f32", "output", e.to_string());
  EXPECT_LE(e.max_abs_error, kF32MaxAbs) << e.to_string();
  EXPECT_GT(e.max_abs_ref, 1.0);  // the outputs are not trivially small

  // begin(): the unified sequence after the refiners, per row [image padded, caption padded].
  std::unique_ptr<models::ZImageState> st = l->model->begin(l->ref.rows());
  std::vector<Tensor> unified;
  for (int b = 0; b < kRows; ++b) {
    const models::ZImageState::Row& r = st->rows[b];
    unified.push_back(st->hidden.slice(0, r.start, r.start + r.image_padded + r.cap_padded));
  }
  const test::ErrorStats u = worst(unified, l->ref.unified);
  report("f32", "unified sequence after the refiners", u.to_string());
  EXPECT_LE(u.max_abs_error, kF32MaxAbs) << u.to_string();
  EXPECT_EQ(st->hidden.shape(), (Dims{64 + 128, 64}));  // (32 + 32) + (64 + 64) tokens
}

// bf16-stored weights in shards (diffusion_pytorch_model.safetensors.index.json), loaded from
// the transformer folder itself: exact bf16 values, so f32 compute meets the same bar.
TEST(ZImageTransformer, Bf16ShardedCheckpointFromTheTransformerFolder) {
  auto l = load(Precision::f32, Layout::bf16_sharded, true);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  const test::ErrorStats e = worst(l->model->forward(l->ref.rows()), l->ref.out);
  report("bf16-stored sharded, f32 compute", "output", e.to_string());
  EXPECT_LE(e.max_abs_error, kF32MaxAbs) << e.to_string();
}

// The real head_dim (128 = axes_dims [32, 48, 48]: the attention kernel's and RoPE's real
// shapes) and edge rows: a 1-token caption with a 2 x 2 latent (one image token and 31 pad
// tokens), a 100-token caption with a 24 x 32 latent.
TEST(ZImageTransformer, RealHeadDimAndEdgeRows) {
  for (const Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    const std::string tag = std::string("head128 ") + std::string(ops::precision_name(p));
    SCOPED_TRACE(tag);
    auto l = load(p, Layout::head128);
    ASSERT_TRUE(l.has_value()) << l.status().to_string();
    const test::ErrorStats e = worst(l->model->forward(l->ref.rows()), l->ref.out);
    report(tag, "output", e.to_string());
    if (p == Precision::f32) EXPECT_LE(e.max_abs_error, kF32MaxAbs) << e.to_string();
    else EXPECT_LE(e.rel_error, p == Precision::bf16 ? 3e-2 : 0.1) << e.to_string();  // the bounds below
  }
}

// NOTE: bounds from the formats. bf16 keeps 8 significant bits (2^-9 relative per rounded
// value), int8 about 7 bits per weight channel and activation row (per-token dynamic scales);
// each block rounds the inputs of its GEMMs and the adaLN scales (up to ~3 here) amplify what
// reaches the residual, so over four blocks and the final layer the outputs move by ~1e-2
// (bf16) and a few 1e-2 (int8) of their range (measured on the native tier: 8e-3 and 3.4e-2).
// Bounds are about 3x those, relative to the range.
struct ReducedCase {
  const char* name;
  Precision precision;
  double rel_bound;
};

TEST(ZImageTransformer, ReducedPrecisionStaysClose) {
  for (const ReducedCase& rc : {ReducedCase{"bf16", Precision::bf16, 3e-2}, ReducedCase{"int8", Precision::int8, 0.1}}) {
    SCOPED_TRACE(rc.name);
    auto l = load(rc.precision);
    ASSERT_TRUE(l.has_value()) << l.status().to_string();
    const test::ErrorStats e = worst(l->model->forward(l->ref.rows()), l->ref.out);
    report(rc.name, "output", e.to_string());
    EXPECT_LE(e.rel_error, rc.rel_bound) << e.to_string();
  }
}

// begin, layers [0, 1), [1, 2), end is predict() to the bit: the split is only where the loop
// stops, never what it computes.
TEST(ZImageDenoiser, SplitPassEqualsPredict) {
  auto dir = generated();
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  auto den = models::load_z_image(*dir, Precision::f32);
  ASSERT_TRUE(den.has_value()) << den.status().to_string();
  const models::Denoiser& d = **den;
  ASSERT_EQ(d.num_blocks(), 2);
  models::DenoiseBatch batch;
  for (int b = 0; b < kRows; ++b) {
    batch.latents.push_back(ref->x[b].view({16, ref->x[b].size(2), ref->x[b].size(3)}));  // [C, H, W]
    batch.sigmas.push_back(ref->sigma.data<float>()[b]);
    batch.conditioning.push_back(ref->cap[b]);
  }
  const std::vector<Tensor> whole = d.predict(batch);
  std::unique_ptr<models::DenoiseState> st = d.begin(batch);
  EXPECT_EQ(st->hidden.shape(), (Dims{192, d.hidden_size()}));
  d.run_blocks(*st, 0, 1);
  d.run_blocks(*st, 1, 1);  // an empty range is a no-op
  d.run_blocks(*st, 1, 2);
  const std::vector<Tensor> split = d.end(*st);
  ASSERT_EQ(split.size(), whole.size());
  for (int b = 0; b < kRows; ++b) EXPECT_EQ(test::compare(split[b], whole[b]).max_abs_error, 0.0) << "row " << b;
}

// The Denoiser speaks the sampler's convention: a [C, H, W] latent at sigma in, the velocity
// d(latent)/d(sigma) out, which is the network's output at t = 1 - sigma, negated.
TEST(ZImageDenoiser, ConvertsSigmaAndNegatesTheOutput) {
  auto l = load(Precision::f32);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  auto den = models::load_z_image(l->dir, Precision::f32);
  ASSERT_TRUE(den.has_value()) << den.status().to_string();
  models::DenoiseBatch batch;
  for (int b = 0; b < kRows; ++b) {
    const Tensor& x = l->ref.x[b];
    batch.latents.push_back(x.view({x.size(0), x.size(2), x.size(3)}));
    batch.sigmas.push_back(l->ref.sigma.data<float>()[b]);
    batch.conditioning.push_back(l->ref.cap[b]);
    EXPECT_EQ(l->ref.t.data<float>()[b], 1.0f - batch.sigmas[b]);
  }
  const std::vector<Tensor> v = (*den)->predict(batch);
  const std::vector<Tensor> raw = l->model->forward(l->ref.rows());
  const Tensor minus_one = Tensor::from<float>({-1.0f}, {1});
  std::vector<Tensor> negated_ref;
  for (int b = 0; b < kRows; ++b) {
    EXPECT_EQ(v[b].shape(), batch.latents[b].shape());
    EXPECT_EQ(test::compare(v[b], ops::mul(raw[b], minus_one).view(v[b].shape())).max_abs_error, 0.0) << "row " << b;
    negated_ref.push_back(ops::mul(l->ref.out[b], minus_one).view(v[b].shape()));
  }
  const test::ErrorStats e = worst(v, negated_ref);
  report("denoiser f32", "velocity vs -reference", e.to_string());
  EXPECT_LE(e.max_abs_error, kF32MaxAbs);
  const models::Denoiser& d = **den;
  EXPECT_EQ(d.hidden_size(), 64);
  EXPECT_EQ(d.latent_channels(), 16);
  EXPECT_EQ(d.size_multiple(), 16);
}

// Rows share nothing but the pass: each row alone gives its row of the batch (cu_seqlens
// keeps the attention within a row; the GEMMs' blocking may differ, hence not bit-equal).
TEST(ZImageTransformer, EachRowAloneMatchesItsRowInTheBatch) {
  auto l = load(Precision::f32);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  const std::vector<ZImageRow> rows = l->ref.rows();
  const std::vector<Tensor> batched = l->model->forward(rows);
  for (int b = 0; b < kRows; ++b) {
    const std::vector<Tensor> alone = l->model->forward({rows[b]});
    EXPECT_LE(test::compare(alone[0], batched[b]).max_abs_error, 1e-5) << "row " << b;
  }
  // The rows in the other order give the same rows.
  const std::vector<Tensor> swapped = l->model->forward({rows[1], rows[0]});
  EXPECT_LE(test::compare(swapped[0], batched[1]).max_abs_error, 1e-5);
  EXPECT_LE(test::compare(swapped[1], batched[0]).max_abs_error, 1e-5);
}

// The caller's arena holds the pass's state and results only: the blocks' intermediates (q/k/v
// [T, 3 dim], the FFN's [T, 2 I], ...) live in the model's per-thread scratch arena.
TEST(ZImageTransformer, TheCallersArenaHoldsOnlyTheStateAndTheResults) {
  auto l = load(Precision::f32);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  Arena arena;
  ArenaScope scope(&arena);
  std::unique_ptr<models::ZImageState> st = l->model->begin(l->ref.rows());
  l->model->run_layers(*st, 0, 2);
  const std::vector<Tensor> out = l->model->end(*st);
  EXPECT_TRUE(test::rel_error_within(out[1], l->ref.out[1], 1e-5));
  const int64_t t = 192, dim = 64;  // (32 + 32) + (64 + 64) tokens
  // hidden and the outputs. (Rope cos and sin, positions and the refiners' token indices,
  // t * (2 half + 2) * 4 bytes, live in the shape's plan, built once on the heap.)
  const int64_t state = t * dim * 4;
  const int64_t results = (16 * 8 * 12 + 16 * 16 * 16) * 4;
  report("f32", "caller's arena after a pass", std::to_string(arena.used_bytes()) + " bytes (state + results " +
                                                 std::to_string(state + results) + ")");
  EXPECT_GE(int64_t(arena.used_bytes()), state + results);
  EXPECT_LE(int64_t(arena.used_bytes()), state + results + 32 * 64);  // small tensors and alignment
  // One block's q/k/v alone ([T, 3 dim] f32) would be 147 KB.
  EXPECT_LT(int64_t(arena.used_bytes()), t * 3 * dim * 4);
}

// The fused kernels and the static plan (models::ZImageKernels) change no float: every switch
// off, alone or all together, gives the same bits as all on, at the tiny width and at the
// real head_dim (128).
TEST(ZImageTransformer, KernelSwitchesGiveTheSameBits) {
  for (Layout layout : {Layout::tiny, Layout::head128}) {
    auto l = load(Precision::f32, layout);
    ASSERT_TRUE(l.has_value()) << l.status().to_string();
    const std::vector<ZImageRow> rows = l->ref.rows();
    const std::vector<Tensor> fused = l->model->forward(rows);
    for (int off = 0; off < 4; ++off) {  // 0..2: one switch off; 3: all off
      models::ZImageKernels k;
      if (off == 0 || off == 3) k.qk_norm_rope = false;
      if (off == 1 || off == 3) k.segmented_norms = false;
      if (off == 2 || off == 3) k.static_plan = false;
      l->model->set_kernels(k);
      const std::vector<Tensor> other = l->model->forward(rows);
      for (int b = 0; b < kRows; ++b) {
        ASSERT_EQ(other[b].shape(), fused[b].shape());
        EXPECT_EQ(std::memcmp(other[b].data<float>(), fused[b].data<float>(), size_t(fused[b].numel()) * 4), 0)
            << "switch " << off << " row " << b << (layout == Layout::head128 ? " head128" : " tiny");
      }
    }
  }
}

// The static plan: once a shape has run, a step of it (begin, the layers, end, in a caller's
// arena reset per step as an engine resets its step arena) takes no buffer from the heap
// and grows no arena: the plan, the refiners' streams, the scratch arena and the packed
// linears' own scratch are all reused. (runtime::aligned_allocations counts every heap
// tensor buffer and arena block; small host vectors are not counted.)
TEST(ZImageTransformer, ASecondStepOfTheSameShapeAllocatesNothing) {
  for (Precision precision : {Precision::f32, Precision::bf16}) {
    auto l = load(precision);
    ASSERT_TRUE(l.has_value()) << l.status().to_string();
    Arena arena;
    std::vector<Tensor> first;
    auto step = [&] {
      arena.reset();
      ArenaScope scope(&arena);
      std::unique_ptr<models::ZImageState> st = l->model->begin(l->ref.rows());
      l->model->run_layers(*st, 0, 2);
      std::vector<Tensor> out = l->model->end(*st);
      if (first.empty()) {
        ArenaScope heap(nullptr);  // kept past the arena's reset
        for (const Tensor& t : out) first.push_back(t.clone());
      }
      return out;
    };
    step();  // builds the plan and grows the arenas
    arena.reset();  // the engine's reset between steps: merges the first step's arena blocks
    const uint64_t before = aligned_allocations();
    const size_t capacity = arena.capacity_bytes();
    const std::vector<Tensor> out = step();
    const uint64_t taken = aligned_allocations() - before;
    report(std::string(ops::precision_name(precision)), "heap buffers taken by a second step", std::to_string(taken));
    EXPECT_EQ(taken, 0u) << ops::precision_name(precision);
    EXPECT_EQ(arena.capacity_bytes(), capacity);
    EXPECT_EQ(arena.num_blocks(), 1);
    // And it computed the same step.
    for (int b = 0; b < kRows; ++b)
      EXPECT_EQ(std::memcmp(out[b].data<float>(), first[b].data<float>(), size_t(first[b].numel()) * 4), 0);
    // Without the plan the count sees what every step rebuilt (tables, streams).
    l->model->set_kernels({.static_plan = false});
    const uint64_t unplanned = aligned_allocations();
    step();
    EXPECT_GT(aligned_allocations() - unplanned, 0u);
  }
}

TEST(ZImageTransformer, FlopsAndWeightBytes) {
  auto l = load(Precision::f32);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  const configs::ZImageConfig& c = l->model->config();
  // dim 64, I = int(64 / 3 * 8) = 170, one refiner layer each, two layers, 16 channels, cap 48.
  ASSERT_EQ(c.ffn_hidden(), 170);
  const double d = 64, inter = 170, per_token = 4 * d * d + 3 * d * inter;
  auto stack = [&](double n, double blocks) { return blocks * (n * per_token + 2 * n * n * d); };
  // 24 image tokens (padded to 32) and 7 caption tokens (padded to 32).
  const double want = 2 * (stack(32, 1) + stack(32, 1) + stack(64, 2) + 24 * 64 * d * 2 + 7 * 48 * d);
  EXPECT_DOUBLE_EQ(l->model->flops(24, 7), want);

  // Z-Image-Turbo's size at 1024 x 1024 (128 x 128 latent: 4096 tokens) with a 128-token prompt.
  configs::ZImageConfig turbo;
  turbo.axes_lens = {1536, 512, 512};
  ASSERT_TRUE(turbo.validate().ok());
  const double real = models::z_image_flops(turbo, 4096, 128);
  char line[160];
  std::snprintf(line, sizeof line, "%.2f TFLOP per row per step (1024x1024, 128-token prompt)", real / 1e12);
  report("z-image-turbo", "flops", line);
  EXPECT_GT(real, 1e13);  // ~6B parameters x 4224 tokens x 2, plus attention
  EXPECT_LT(real, 1e14);

  const int64_t f32_bytes = l->model->weight_bytes();
  auto bf16 = models::load_z_image_transformer(l->dir, Precision::bf16);
  ASSERT_TRUE(bf16.has_value()) << bf16.status().to_string();
  // t_embedder and cap_embedder stay f32 (256x1024 + 1024 + 1024x64 + 64 + 48x64 + 64 floats),
  // and so do every bias: x_embedder 64, three adaLN projections 256 each, the final layer's 64 + 64.
  const int64_t kept = (256 * 1024 + 1024 + 1024 * 64 + 64 + 48 * 64 + 64) * 4 + (64 + 3 * 256 + 64 + 64) * 4;
  EXPECT_EQ((*bf16)->weight_bytes() - kept, (f32_bytes - kept) / 2);
}

// ---- load errors -----------------------------------------------------------------------------

// test::write_edited_checkpoint for a diffusers folder: config.json edited, the weights
// rewritten into diffusion_pytorch_model.safetensors less a tensor or with one transposed.
Result<std::string> edited_transformer(const std::string& name, const std::string& folder,
                                       const test::CheckpointEdit& edit) {
  const std::string dir = test::scratch_dir(name);
  PRISM_ASSIGN_OR_RETURN(std::string config, read_file(folder + "/config.json"));
  if (!edit.config_from.empty()) {
    const size_t at = config.find(edit.config_from);
    if (at == std::string::npos) return not_found("'" + edit.config_from + "' not in config.json");
    config.replace(at, edit.config_from.size(), edit.config_to);
  }
  PRISM_RETURN_IF_ERROR(write_file(dir + "/config.json", config));
  PRISM_ASSIGN_OR_RETURN(const formats::WeightSource src,
                         formats::WeightSource::open(folder + "/diffusion_pytorch_model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& tensor : src.names()) {
    if (tensor == edit.drop) continue;
    PRISM_ASSIGN_OR_RETURN(Tensor t, src.get(tensor));
    tensors.emplace_back(tensor, tensor == edit.transpose ? t.transpose(0, 1).contiguous() : t);
  }
  PRISM_RETURN_IF_ERROR(formats::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", tensors));
  return dir;
}

TEST(ZImageLoad, BrokenCheckpointsGiveClearErrors) {
  auto dir = generated();
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  const std::string folder = *dir + "/transformer";
  struct Case {
    const char* name;
    test::CheckpointEdit edit;
    StatusCode code;
    std::vector<std::string> mentions;
  };
  const Case cases[] = {
      {"missing_tensor", {.drop = "layers.1.feed_forward.w3.weight"}, StatusCode::not_found,
       {"layers.1.feed_forward.w3.weight"}},
      {"missing_pad_token", {.drop = "cap_pad_token"}, StatusCode::not_found, {"cap_pad_token"}},
      {"transposed", {.transpose = "cap_embedder.1.weight"}, StatusCode::invalid_argument,
       {"cap_embedder.1.weight", "[64, 48]", "[48, 64]"}},
      {"wrong_cap_feat_dim", {.config_from = "\"cap_feat_dim\": 48", .config_to = "\"cap_feat_dim\": 40"},
       StatusCode::invalid_argument, {"cap_embedder.0.weight"}},
      {"axes_dims_not_head_dim", {.config_from = "\"axes_dims\": [\n    8,", .config_to = "\"axes_dims\": [\n    10,"},
       StatusCode::invalid_argument, {"config.json", "axes_dims"}},
      {"other_class", {.config_from = "ZImageTransformer2DModel", .config_to = "FluxTransformer2DModel"},
       StatusCode::unimplemented, {"FluxTransformer2DModel"}},
      {"other_patch", {.config_from = "\"all_patch_size\": [\n    2\n  ]", .config_to = "\"all_patch_size\": [\n    4\n  ]"},
       StatusCode::unimplemented, {"all_patch_size"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto edited = edited_transformer(std::string("z_image_") + c.name, folder, c.edit);
    ASSERT_TRUE(edited.has_value()) << edited.status().to_string();
    auto model = models::load_z_image_transformer(*edited, Precision::f32);
    ASSERT_FALSE(model.has_value());
    const Status s = model.status();
    std::cout << "[ error    ] " << c.name << ": " << s.to_string() << "\n";
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    for (const std::string& m : c.mentions)
      EXPECT_NE(s.message().find(m), std::string::npos) << m << " in " << s.to_string();
  }
}

TEST(ZImageLoad, DirectoriesWithoutAModelAreClearErrors) {
  const std::string empty = test::scratch_dir("z_image_empty");
  auto none = models::load_z_image(empty, Precision::f32);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.status().code(), StatusCode::not_found) << none.status().to_string();
  EXPECT_NE(none.status().message().find("model_index.json"), std::string::npos) << none.status().to_string();

  // A pipeline whose transformer is another class.
  const std::string other = test::scratch_dir("z_image_other_pipeline");
  ASSERT_TRUE(write_file(other + "/model_index.json",
                         R"({"_class_name": "FluxPipeline", "transformer": ["diffusers", "FluxTransformer2DModel"]})")
                  .ok());
  auto flux = models::load_z_image(other, Precision::f32);
  ASSERT_FALSE(flux.has_value());
  EXPECT_EQ(flux.status().code(), StatusCode::unimplemented) << flux.status().to_string();
  EXPECT_NE(flux.status().message().find("FluxTransformer2DModel"), std::string::npos);

  // A transformer folder with a config and no weights names the files it looked for.
  const std::string bare = test::scratch_dir("z_image_no_weights");
  ASSERT_TRUE(write_file(bare + "/config.json", R"({"_class_name": "ZImageTransformer2DModel"})").ok());
  auto no_weights = models::load_z_image(bare, Precision::f32);
  ASSERT_FALSE(no_weights.has_value());
  EXPECT_EQ(no_weights.status().code(), StatusCode::not_found) << no_weights.status().to_string();
  EXPECT_NE(no_weights.status().message().find("diffusion_pytorch_model.safetensors"), std::string::npos)
      << no_weights.status().to_string();
}

}  // namespace
}  // namespace prism

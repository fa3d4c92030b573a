// Parity of the AutoencoderKL decoder (models/vae) with tests/reference/vae_decoder.py, a
// from-scratch float64 re-statement of diffusers' AutoencoderKL.decode and tiled_decode. The
// generator writes a tiny random vae/ folder in diffusers' layout (config.json keys,
// diffusion_pytorch_model.safetensors names) and reference.safetensors: latents in the
// denoiser's space, the decoded images, the tiled decode with the config's sample_size tiles,
// and diffusers' uint8 post-processing. Layouts: "tiny" (FLUX's latent 16, scaling and shift,
// mid-block attention; two blocks, 8x8 x 2, 12x10 and 80x72 latents) stored f32 and bf16, and "tiny3"
// (three blocks, post_quant_conv, no attention, shift_factor null). Plus the loader's errors
// and the tiling option's rules.
//
// NOTE (bound): f32 end to end on every tier: oneDNN's f32 convolutions and matmuls, the f32
// packed linears and Prism's group_norm differ from float64 by f32 rounding of dot products of
// at most 64 * 9 terms, renormalised by each GroupNorm; over the ~12 layers that is ~1e-6 of the
// outputs' range (|image| <= 1.6). 1e-4 absolute leaves two orders of magnitude for the
// summation orders of the avx2 / avx512 / avx512_bf16 tiers (PRISM_ISA), none of which rounds
// to bf16 at Precision::f32.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "base/file.h"
#include "formats/safetensors.h"
#include "models/vae/autoencoder_kl.h"
#include "runtime/arena.h"
#include "runtime/ops.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism {
namespace {

using models::AutoencoderKLDecoder;
using models::VaeTiling;

constexpr char kScript[] = "vae_decoder.py";
constexpr double kMaxAbsError = 1e-4;
// NOTE (bf16 bound): with bf16 convolutions each conv rounds its input and weights to bf16,
// so each product is off by at most 2^-7 of its magnitude; GroupNorm brings every stage back to
// unit scale, so the error an output can carry grows at most linearly over the convs in series
// ("tiny": conv_in, 2 mid resnets x 2, 2 resnets x 2 in each of the two up blocks, one
// upsampler, conv_out: 15). Bound: 15 * 2^-7 of the image's range (max |ref|). Measured on
// amx and avx512_bf16: 0.008-0.0095 at max |ref| 1.4-1.7, ~20x inside it; on tiers without native
// bf16 the convs compute in f32 and the f32 figure (~1.5e-6) holds.
constexpr double kSeriesConvs = 15;

struct Layout {
  const char* name;  // the generated directory's name and the test's
  const char* args;  // vae_decoder.py arguments
  std::vector<std::string> cases;        // latents decoded whole
  std::vector<std::string> tiled_cases;  // and tiled
  int64_t factor;                        // 2^(blocks - 1)
};

// 80x72: 5760 positions, so the mid-block attention runs in two query chunks (kMaxScoreFloats).
const Layout kLayouts[] = {
    {"tiny", "--layout tiny", {"8x8", "12x10", "80x72"}, {"8x8", "12x10"}, 2},
    {"tiny_bf16", "--layout tiny --weight-dtype bf16", {"8x8", "12x10", "80x72"}, {"8x8", "12x10"}, 2},
    {"tiny3", "--layout tiny3", {"6x5"}, {"6x5"}, 4},
};

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.name; }
std::string layout_name(const ::testing::TestParamInfo<Layout>& info) { return info.param.name; }

Result<std::string> generated_dir(const Layout& layout) {
  return test::generate_reference(kScript, std::string("vae_decoder_") + layout.name, layout.args);
}

void report(const std::string& tag, const std::string& what, const test::ErrorStats& s) {
  std::cout << "[ parity   ] " << tag << " " << what << ": " << s.to_string() << "\n";
}

::testing::AssertionResult max_abs_within(const Tensor& got, const Tensor& ref, double bound) {
  if (!(got.shape() == ref.shape()))
    return ::testing::AssertionFailure() << "shape " << got.shape().to_string() << " != " << ref.shape().to_string();
  const test::ErrorStats s = test::compare(got, ref);
  if (s.max_abs_error <= bound) return ::testing::AssertionSuccess() << s.to_string();
  return ::testing::AssertionFailure() << s.to_string() << ": max abs > " << bound;
}

class VaeDecoderParity : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    Result<std::string> dir = generated_dir(GetParam());
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    dir_ = *dir;
    Result<std::unique_ptr<AutoencoderKLDecoder>> vae = AutoencoderKLDecoder::load(dir_);
    ASSERT_TRUE(vae.has_value()) << vae.status().to_string();
    vae_ = std::move(*vae);
    Result<std::shared_ptr<const formats::SafetensorsFile>> ref = test::open_reference(dir_);
    ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
    ref_ = *ref;
  }
  Tensor ref(const std::string& name) const {
    Result<Tensor> t = ref_->get(name);
    PRISM_CHECK_MSG(t.has_value(), "reference tensor missing");
    return *t;
  }

  std::string dir_;
  std::unique_ptr<AutoencoderKLDecoder> vae_;
  std::shared_ptr<const formats::SafetensorsFile> ref_;
};

// decode of every case, diffusers' uint8 post-processing of the reference images, and the
// batch: decoded image by image into the caller's arena, each image alone giving the same.
TEST_P(VaeDecoderParity, DecodeMatchesReference) {
  EXPECT_EQ(vae_->spatial_factor(), GetParam().factor);
  for (const std::string& c : GetParam().cases) {
    const Tensor z = vae_->unscale_latents(ref("latents_" + c));
    const Tensor image = vae_->decode(z);
    EXPECT_TRUE(max_abs_within(image, ref("image_" + c), kMaxAbsError)) << c;
    report(GetParam().name, "decode " + c, test::compare(image, ref("image_" + c)));
    const Tensor pixels = models::images_to_uint8(ref("image_" + c));
    ASSERT_EQ(pixels.shape(), ref("uint8_" + c).shape());
    EXPECT_EQ(test::compare(pixels, ref("uint8_" + c)).max_abs_error, 0.0) << c;
  }
  const std::string c = GetParam().cases.front();
  const Tensor z = vae_->unscale_latents(ref("latents_" + c));
  const Tensor batch = vae_->decode(z);
  for (int64_t i = 0; i < z.size(0); ++i)
    EXPECT_TRUE(max_abs_within(vae_->decode(z.slice(0, i, i + 1).contiguous()), batch.slice(0, i, i + 1), 0.0));
  Arena arena;
  ArenaScope scope(&arena);
  const Tensor in_arena = vae_->decode(z);
  EXPECT_TRUE(max_abs_within(in_arena, batch, 0.0));
  // Only the result in the caller's arena: the intermediates went to the heap.
  EXPECT_GE(arena.used_bytes(), in_arena.nbytes());
  EXPECT_LT(arena.used_bytes(), in_arena.nbytes() + 4096);
}

// tiled_decode with the config's sample_size tiles, as the reference; decode with tiling on
// tiles only latents larger than a tile (diffusers' enable_tiling).
TEST_P(VaeDecoderParity, TiledDecodeMatchesReferenceTiledDecode) {
  for (const std::string& c : GetParam().tiled_cases) {
    const Tensor z = vae_->unscale_latents(ref("latents_" + c));
    const Tensor tiled = vae_->tiled_decode(z);
    EXPECT_TRUE(max_abs_within(tiled, ref("tiled_" + c), kMaxAbsError)) << c;
    report(GetParam().name, "tiled " + c, test::compare(tiled, ref("tiled_" + c)));
    // Not a bound: tiles this small (a few latent cells) see other GroupNorm statistics than
    // the whole image, so the two differ by O(1); printed for the record.
    report(GetParam().name, "tiled vs untiled " + c, test::compare(tiled, ref("image_" + c)));
  }
  const std::string c = GetParam().tiled_cases.back();
  const Tensor z = vae_->unscale_latents(ref("latents_" + c));
  const int64_t tile = vae_->config().tile_latent_size();
  ASSERT_TRUE(z.size(2) > tile || z.size(3) > tile);
  EXPECT_TRUE(max_abs_within(vae_->decode(z, VaeTiling{}), ref("tiled_" + c), kMaxAbsError));
  // One tile's worth of latent: decoded whole, the same as without tiling.
  const Tensor corner = z.slice(2, 0, tile).slice(3, 0, tile).contiguous();
  EXPECT_TRUE(max_abs_within(vae_->decode(corner, VaeTiling{}), vae_->decode(corner), 0.0));
  // One tile holding the whole latent (its step, 3/4 of it, past the latent's end too):
  // tiled_decode is the plain decode.
  const int64_t big = 8 * std::max(z.size(2), z.size(3));
  EXPECT_TRUE(max_abs_within(vae_->tiled_decode(z, {.tile_latent_size = big}), vae_->decode(z), 0.0));
}

INSTANTIATE_TEST_SUITE_P(Layouts, VaeDecoderParity, ::testing::ValuesIn(kLayouts), layout_name);

// The same decoder with its convolutions packed as bf16 (AutoencoderKLLoadOptions), against
// the float64 reference within NOTE (bf16 bound), and against the plain f32
// convolutions (pack_convs off), which must match the reference as the packed f32 ones do.
TEST(VaeDecoderPrecision, Bf16ConvsWithinBound) {
  Result<std::string> dir = generated_dir(kLayouts[0]);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  Result<std::unique_ptr<AutoencoderKLDecoder>> bf16 =
      AutoencoderKLDecoder::load(*dir, {.conv_precision = ops::Precision::bf16});
  ASSERT_TRUE(bf16.has_value()) << bf16.status().to_string();
  Result<std::unique_ptr<AutoencoderKLDecoder>> plain = AutoencoderKLDecoder::load(*dir, {.pack_convs = false});
  ASSERT_TRUE(plain.has_value()) << plain.status().to_string();
  Result<std::shared_ptr<const formats::SafetensorsFile>> ref = test::open_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  for (const std::string& c : kLayouts[0].cases) {
    const Tensor z = (*bf16)->unscale_latents(*(*ref)->get("latents_" + c));
    const Tensor want = *(*ref)->get("image_" + c);
    const Tensor got = (*bf16)->decode(z);
    const double bound = kSeriesConvs * std::ldexp(1.0, -7) * test::compare(got, want).max_abs_ref;
    EXPECT_TRUE(max_abs_within(got, want, bound)) << c;
    report("tiny", "bf16 convs " + c + " (" + ops::conv2d_path(ops::Precision::bf16) + ")", test::compare(got, want));
    EXPECT_TRUE(max_abs_within((*plain)->decode(z), want, kMaxAbsError)) << c;
  }
}

// ---- the loader and the tiling option ---------------------------------------------------------

constexpr char kWeightsFile[] = "diffusion_pytorch_model.safetensors";

// A copy of the tiny vae/ folder with config.json edited and a tensor dropped or reshaped.
Result<std::string> edited_copy(const std::string& name, const std::string& config_from, const std::string& config_to,
                                const std::string& drop, const std::string& reshape = "") {
  PRISM_ASSIGN_OR_RETURN(const std::string src, generated_dir(kLayouts[0]));
  const std::string dir = test::scratch_dir(name);
  PRISM_ASSIGN_OR_RETURN(std::string config, read_file(src + "/config.json"));
  if (!config_from.empty()) {
    const size_t at = config.find(config_from);
    if (at == std::string::npos) return not_found("'" + config_from + "' not in config.json");
    config.replace(at, config_from.size(), config_to);
  }
  PRISM_RETURN_IF_ERROR(write_file(dir + "/config.json", config));
  PRISM_ASSIGN_OR_RETURN(const formats::WeightSource weights, formats::WeightSource::open(src + "/" + kWeightsFile));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& t : weights.names()) {
    if (t == drop) continue;
    PRISM_ASSIGN_OR_RETURN(Tensor value, weights.get(t));
    tensors.emplace_back(t, t == reshape ? value.view({-1}) : value);
  }
  PRISM_RETURN_IF_ERROR(formats::write_safetensors(dir + "/" + kWeightsFile, tensors));
  return dir;
}

// A missing or misshapen tensor is named; the config's switches decide which tensors are read.
TEST(VaeDecoderLoad, ErrorsNameTheTensor) {
  Result<std::string> dir = edited_copy("vae_missing", "", "", "decoder.mid_block.attentions.0.to_k.weight");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  Result<std::unique_ptr<AutoencoderKLDecoder>> vae = AutoencoderKLDecoder::load(*dir);
  ASSERT_FALSE(vae.has_value());
  EXPECT_NE(vae.status().message().find("decoder.mid_block.attentions.0.to_k.weight"), std::string::npos)
      << vae.status().to_string();

  dir = edited_copy("vae_reshaped", "", "", "", "decoder.up_blocks.1.resnets.0.conv_shortcut.weight");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  vae = AutoencoderKLDecoder::load(*dir);
  ASSERT_FALSE(vae.has_value());
  EXPECT_NE(vae.status().message().find("conv_shortcut.weight"), std::string::npos) << vae.status().to_string();

  // post_quant_conv asked for but absent.
  dir = edited_copy("vae_post_quant", "\"use_post_quant_conv\": false", "\"use_post_quant_conv\": true", "");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  vae = AutoencoderKLDecoder::load(*dir);
  ASSERT_FALSE(vae.has_value());
  EXPECT_NE(vae.status().message().find("post_quant_conv.weight"), std::string::npos) << vae.status().to_string();
  // Attention switched off: its tensors are ignored, the rest loads.
  dir = edited_copy("vae_no_attention", "\"mid_block_add_attention\": true", "\"mid_block_add_attention\": false", "");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  EXPECT_TRUE(AutoencoderKLDecoder::load(*dir).has_value());
}

TEST(VaeDecoderLoad, NoWeightsFileIsAnError) {
  const std::string dir = test::scratch_dir("vae_empty");
  ASSERT_TRUE(write_file(dir + "/config.json", R"({"_class_name": "AutoencoderKL"})").ok());
  Result<std::unique_ptr<AutoencoderKLDecoder>> vae = AutoencoderKLDecoder::load(dir);
  ASSERT_FALSE(vae.has_value());
  EXPECT_NE(vae.status().message().find(dir), std::string::npos) << vae.status().to_string();
}

TEST(VaeDecoderTiling, TilesMustCoverTheImageExactly) {
  Result<std::string> dir = generated_dir(kLayouts[0]);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  Result<std::unique_ptr<AutoencoderKLDecoder>> vae = AutoencoderKLDecoder::load(*dir);
  ASSERT_TRUE(vae.has_value()) << vae.status().to_string();
  const AutoencoderKLDecoder& v = **vae;
  EXPECT_EQ(v.config().tile_latent_size(), 4);  // sample_size 8 / factor 2
  EXPECT_TRUE(v.check_tiling({}).ok());
  EXPECT_TRUE(v.check_tiling({.tile_latent_size = 8}).ok());  // step 6 cells = 12 px = 16 - 4
  // 5 cells: step int(3.75) = 3 cells = 6 px, but 10 - int(2.5) = 8 px kept: gaps.
  EXPECT_FALSE(v.check_tiling({.tile_latent_size = 5}).ok());
  EXPECT_FALSE(v.check_tiling({.tile_latent_size = 4, .overlap_factor = 1.0}).ok());
  EXPECT_FALSE(v.check_tiling({.tile_latent_size = 1}).ok());  // step 0
  EXPECT_TRUE(v.check_tiling({.tile_latent_size = 4, .overlap_factor = 0.0}).ok());  // no blending
}

}  // namespace
}  // namespace prism

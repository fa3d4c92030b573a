// Parity of the CLIP / SigLIP vision towers and dual encoders (models/vision) with
// tests/reference/vision_family.py. For each family the generator writes a tiny random
// CLIPModel / SiglipModel directory (HF names and config keys) and reference.safetensors: three
// views with the float64 tower hidden states after every layer, the post-layernormed last
// state and the pooled output, the image embeddings, and three texts (16, 7 and 11 tokens)
// with every token's projected state and the text embeddings. This test loads the directory
// as a deployment would and compares: f32 within 1e-4 of the range, bf16 / int8 by cosine; a
// batch of views against single views; truncated and headless towers; the loader's errors.
#include <cmath>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "formats/safetensors.h"
#include "models/encoder.h"
#include "models/vision/dual_encoder.h"
#include "models/vision/vision_tower.h"
#include "runtime/arena.h"
#include "runtime/ops.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism {
namespace {

using models::EncoderBatch;
using models::VisionTower;
using configs::VisionTowerConfig;
using configs::VisionTowerKind;
using ops::Precision;

constexpr char kScript[] = "vision_family.py";
constexpr int kLayers = 3;  // the tiny towers' num_hidden_layers

struct Family {
  const char* name;
  VisionTowerKind kind;
};
const Family kFamilies[] = {{"clip", VisionTowerKind::clip}, {"siglip", VisionTowerKind::siglip}};
void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }
std::string family_name(const ::testing::TestParamInfo<Family>& info) { return info.param.name; }

Result<std::string> generated_dir(const Family& f) {
  return test::generate_reference(kScript, std::string("vision_family_") + f.name,
                                  std::string("write --family ") + f.name);
}

struct Reference {
  std::shared_ptr<const formats::SafetensorsFile> file;
  Tensor get(const std::string& name) const {
    Result<Tensor> t = file->get(name);
    PRISM_CHECK_MSG(t.has_value(), "reference tensor missing");
    return *t;
  }
  Tensor pixels() const { return get("pixel_values"); }
  // [V, N, hidden] flattened to the tower's [V * N, hidden].
  Tensor rows(const std::string& name) const {
    const Tensor t = get(name);
    return t.view({t.size(0) * t.size(1), t.size(2)});
  }
};

Result<Reference> read_reference(const std::string& dir) {
  PRISM_ASSIGN_OR_RETURN(auto file, test::open_reference(dir));
  return Reference{file};
}

// config.json's vision_config (dual encoders) or the whole file (bare towers).
Result<VisionTowerConfig> tower_config(const std::string& dir, VisionTowerKind kind) {
  PRISM_ASSIGN_OR_RETURN(const std::string text, read_file(dir + "/config.json"));
  const nlohmann::json j = nlohmann::json::parse(text);
  return VisionTowerConfig::from_hf(j.contains("vision_config") ? j["vision_config"] : j, kind);
}

Result<std::unique_ptr<VisionTower>> load_tower(const std::string& dir, VisionTowerKind kind, Precision precision,
                                                int num_layers_used = 0) {
  PRISM_ASSIGN_OR_RETURN(const VisionTowerConfig config, tower_config(dir, kind));
  PRISM_ASSIGN_OR_RETURN(const formats::WeightSource src, formats::WeightSource::open(dir));
  return VisionTower::load(src, "vision_model.", config, precision, num_layers_used);
}

// Rows `rows` of x [T, H]: [rows.size(), H].
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  Tensor out = Tensor::empty({int64_t(rows.size()), x.size(1)}, DType::f32);
  for (size_t i = 0; i < rows.size(); ++i) out.select(0, int64_t(i)).copy_from(x.select(0, rows[i]));
  return out;
}

// The last token of each sequence: the embedder's last-token pooling.
Tensor last_tokens(const Tensor& hidden, const Tensor& cu_seqlens) {
  std::vector<int64_t> rows;
  for (int64_t s = 1; s < cu_seqlens.size(0); ++s) rows.push_back(cu_seqlens.data<int32_t>()[s] - 1);
  return gather_rows(hidden, rows);
}

// Per-row cosine similarity of two [S, H] tensors: the lowest.
double min_cosine(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  double lowest = 1.0;
  for (int64_t s = 0; s < x.size(0); ++s) {
    const float* p = x.data<float>() + s * x.size(1);
    const float* q = y.data<float>() + s * y.size(1);
    double pq = 0, pp = 0, qq = 0;
    for (int64_t i = 0; i < x.size(1); ++i) {
      pq += double(p[i]) * q[i];
      pp += double(p[i]) * p[i];
      qq += double(q[i]) * q[i];
    }
    lowest = std::min(lowest, pq / std::sqrt(pp * qq));
  }
  return lowest;
}

// EXPECT within `bound`, and print the measured error (the figures of the parity report).
void expect_close(const Tensor& got, const Tensor& ref, double bound, const std::string& tag) {
  std::cout << "[ parity   ] " << tag << ": " << test::compare(got, ref).to_string() << "\n";
  EXPECT_TRUE(test::rel_error_within(got, ref, bound)) << tag;
}

// ---- fp32: the ARCHITECTURE.md section 5 bar ----------------------------------------------

// NOTE: the reference is float64 on the stored weights, so the error is the C++ side's f32
// rounding over ~3 layers: orders of magnitude under 1e-4 of the range.
constexpr double kF32Bound = 1e-4;

class VisionFamilyF32 : public ::testing::TestWithParam<Family> {};

TEST_P(VisionFamilyF32, TowerHiddenStatesAtEveryLayerAndPooled) {
  const Family& f = GetParam();
  auto dir = generated_dir(f);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  auto tower = load_tower(*dir, f.kind, Precision::f32);
  ASSERT_TRUE(tower.has_value()) << tower.status().to_string();
  const VisionTower& t = **tower;
  EXPECT_EQ(t.num_layers_loaded(), kLayers);
  EXPECT_EQ(t.has_head(), f.kind == VisionTowerKind::siglip);
  const Tensor pixels = ref->pixels();
  for (int k = 0; k <= kLayers; ++k) {
    expect_close(t.forward(pixels, k, false), ref->rows("vision_hidden_" + std::to_string(k)), kF32Bound,
                 std::string(f.name) + " hidden_states[" + std::to_string(k) + "]");
  }
  const Tensor last = t.forward(pixels, kLayers, true);
  expect_close(last, ref->rows("vision_last_hidden"), kF32Bound, std::string(f.name) + " last, post-layernorm");
  if (t.has_head()) {
    expect_close(t.pool(last), ref->get("vision_pooled"), kF32Bound, std::string(f.name) + " pooled (head)");
  }
}

TEST_P(VisionFamilyF32, ImageAndTextEmbeddings) {
  const Family& f = GetParam();
  auto dir = generated_dir(f);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  ASSERT_TRUE(models::is_dual_encoder(*dir));
  auto model = models::load_dual_encoder(*dir, Precision::f32);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  const Tensor image_embeds = ref->get("image_embeds");
  EXPECT_EQ(model->image->image_size(), 32);
  EXPECT_EQ(model->image->embedding_size(), image_embeds.size(1));
  expect_close(model->image->embed_images(ref->pixels()), image_embeds, kF32Bound,
               std::string(f.name) + " image_embeds");

  const Tensor cu = ref->get("cu_seqlens");
  const EncoderBatch batch{ref->get("token_ids"), cu, Tensor()};
  EXPECT_EQ(model->text->hidden_size(), ref->get("text_embeds").size(1));
  EXPECT_EQ(model->text->max_tokens(), 16);
  const Tensor hidden = model->text->encode(batch);
  expect_close(hidden, ref->get("text_hidden"), kF32Bound, std::string(f.name) + " text states, every token");
  expect_close(last_tokens(hidden, cu), ref->get("text_embeds"), kF32Bound, std::string(f.name) + " text_embeds");
}

// The padded layout (kv_lens): each text in a 16-token slot, padding after it; the real rows
// are the packed ones.
TEST_P(VisionFamilyF32, PaddedTextBatchMatchesPacked) {
  const Family& f = GetParam();
  auto dir = generated_dir(f);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  auto model = models::load_dual_encoder(*dir, Precision::f32);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  const Tensor ids = ref->get("token_ids"), cu = ref->get("cu_seqlens");
  const int64_t num_seqs = cu.size(0) - 1, slot = 16;
  EncoderBatch padded;
  padded.token_ids = Tensor::empty({num_seqs * slot}, DType::i32);
  padded.cu_seqlens = Tensor::empty({num_seqs + 1}, DType::i32);
  padded.kv_lens = Tensor::empty({num_seqs}, DType::i32);
  std::vector<int64_t> real_rows;
  for (int64_t s = 0; s <= num_seqs; ++s) padded.cu_seqlens.data<int32_t>()[s] = int32_t(s * slot);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t b = cu.data<int32_t>()[s], len = cu.data<int32_t>()[s + 1] - b;
    padded.kv_lens.data<int32_t>()[s] = len;
    for (int32_t i = 0; i < slot; ++i)
      padded.token_ids.data<int32_t>()[s * slot + i] = i < len ? ids.data<int32_t>()[b + i] : 1;
    for (int32_t i = 0; i < len; ++i) real_rows.push_back(s * slot + i);
  }
  const Tensor got = gather_rows(model->text->encode(padded), real_rows);
  EXPECT_TRUE(test::rel_error_within(got, ref->get("text_hidden"), kF32Bound));
}

// Views are independent: three in one call are the three single calls.
TEST_P(VisionFamilyF32, BatchOfViewsEqualsSingleViews) {
  const Family& f = GetParam();
  auto dir = generated_dir(f);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  auto tower = load_tower(*dir, f.kind, Precision::f32);
  ASSERT_TRUE(tower.has_value()) << tower.status().to_string();
  auto model = models::load_dual_encoder(*dir, Precision::f32);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  const Tensor pixels = ref->pixels();
  const int64_t n = (*tower)->config().num_positions();
  const Tensor batch_hidden = (*tower)->forward(pixels, kLayers, true);
  const Tensor batch_embeds = model->image->embed_images(pixels);
  const Tensor none = Tensor::empty({0, 3, 32, 32}, DType::f32);
  EXPECT_EQ(model->image->embed_images(none).size(0), 0);
  EXPECT_EQ((*tower)->forward(none, kLayers, true).size(0), 0);
  for (int64_t v = 0; v < pixels.size(0); ++v) {
    const Tensor one = pixels.slice(0, v, v + 1).contiguous();
    // GEMMs of other row counts may sum in another order: equal to f32 rounding, not bits.
    EXPECT_TRUE(test::rel_error_within((*tower)->forward(one, kLayers, true), batch_hidden.slice(0, v * n, (v + 1) * n),
                                       1e-6))
        << "view " << v;
    EXPECT_TRUE(test::rel_error_within(model->image->embed_images(one), batch_embeds.slice(0, v, v + 1), 1e-6))
        << "view " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, VisionFamilyF32, ::testing::ValuesIn(kFamilies), family_name);

// ---- reduced precision -----------------------------------------------------------------------

// NOTE: bf16 weights and activations keep 8 significant bits (relative rounding 2^-9 ≈ 2e-3
// per operand); over ~4 layers of O(1) activations the embeddings' relative error stays near
// 1e-2, a cosine above 1 - 1e-4 / 2. 0.999 is the bar; int8 (per-token and
// per-channel scales, 7 bits) is a few times coarser.
struct Reduced {
  const char* name;
  Precision precision;
  double min_cosine;
};
const Reduced kReduced[] = {{"bf16", Precision::bf16, 0.999}, {"int8", Precision::int8, 0.995}};

class VisionFamilyReduced : public ::testing::TestWithParam<Family> {};

TEST_P(VisionFamilyReduced, EmbeddingsStayClose) {
  const Family& f = GetParam();
  auto dir = generated_dir(f);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  for (const Reduced& r : kReduced) {
    SCOPED_TRACE(r.name);
    auto model = models::load_dual_encoder(*dir, r.precision);
    ASSERT_TRUE(model.has_value()) << model.status().to_string();
    const double image = min_cosine(model->image->embed_images(ref->pixels()), ref->get("image_embeds"));
    const Tensor cu = ref->get("cu_seqlens");
    const Tensor hidden = model->text->encode(EncoderBatch{ref->get("token_ids"), cu, Tensor()});
    const double text = min_cosine(last_tokens(hidden, cu), ref->get("text_embeds"));
    std::cout << "[ parity   ] " << f.name << " " << r.name << " min cosine: image " << image << ", text " << text
              << "\n";
    EXPECT_GT(image, r.min_cosine);
    EXPECT_GT(text, r.min_cosine);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, VisionFamilyReduced, ::testing::ValuesIn(kFamilies), family_name);

// ---- the towers other models build on --------------------------------------------------------

// LLaVA reads hidden_states[-2]: a tower loaded with one layer less computes exactly it.
TEST(VisionTower, TruncatedTowerComputesTheLayersItLoaded) {
  auto dir = generated_dir(kFamilies[0]);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  auto tower = load_tower(*dir, VisionTowerKind::clip, Precision::f32, kLayers - 1);
  ASSERT_TRUE(tower.has_value()) << tower.status().to_string();
  EXPECT_EQ((*tower)->num_layers_loaded(), kLayers - 1);
  EXPECT_TRUE(test::rel_error_within((*tower)->forward(ref->pixels(), kLayers - 1, false),
                                     ref->rows("vision_hidden_" + std::to_string(kLayers - 1)), kF32Bound));
  auto too_many = load_tower(*dir, VisionTowerKind::clip, Precision::f32, kLayers + 1);
  ASSERT_FALSE(too_many.has_value());
  EXPECT_EQ(too_many.status().code(), StatusCode::invalid_argument) << too_many.status().to_string();
}

// Idefics3's tower: SigLIP without the pooling head, under a bare SiglipVisionModel's names.
TEST(VisionTower, HeadlessSiglipTower) {
  auto dir = test::generate_reference(kScript, "vision_family_siglip_tower_no_head",
                                      "write-tower --kind siglip --no-head");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  auto tower = load_tower(*dir, VisionTowerKind::siglip, Precision::f32);
  ASSERT_TRUE(tower.has_value()) << tower.status().to_string();
  EXPECT_FALSE((*tower)->has_head());
  EXPECT_TRUE(test::rel_error_within((*tower)->forward(ref->pixels(), kLayers, true), ref->rows("vision_last_hidden"),
                                     kF32Bound));
  EXPECT_TRUE(test::rel_error_within((*tower)->forward(ref->pixels(), 1, false), ref->rows("vision_hidden_1"),
                                     kF32Bound));
}

// Only the results come from the caller's arena (activations live in the towers' own,
// reused ones), and a second call gives the same bits.
TEST(VisionTower, ResultIsTheOnlyAllocationInTheCallersArenaAndRepeats) {
  auto dir = generated_dir(kFamilies[1]);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  auto model = models::load_dual_encoder(*dir, Precision::f32);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  const Tensor pixels = ref->pixels();
  const EncoderBatch batch{ref->get("token_ids"), ref->get("cu_seqlens"), Tensor()};
  Arena arena(size_t(1) << 20);
  ArenaScope scope(&arena);
  Tensor first_image, first_text;
  {
    const Tensor image = model->image->embed_images(pixels);
    const Tensor text = model->text->encode(batch);
    ArenaScope heap(nullptr);  // copies that outlive the arena's resets
    first_image = image.clone();
    first_text = text.clone();
  }
  arena.reset();
  const Tensor image = model->image->embed_images(pixels);
  EXPECT_EQ(arena.used_bytes(), size_t(image.numel()) * sizeof(float));
  EXPECT_EQ(test::compare(first_image, image).max_abs_error, 0.0);
  arena.reset();
  const Tensor text = model->text->encode(batch);
  EXPECT_EQ(arena.used_bytes(), size_t(text.numel()) * sizeof(float));
  EXPECT_EQ(test::compare(first_text, text).max_abs_error, 0.0);
}

TEST(VisionTower, FlopsCountTheMatmuls) {
  auto dir = generated_dir(kFamilies[0]);  // CLIP: vision H 64, I 128, 16 patches of 3·8·8, + class; text H 48, I 96
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto tower = load_tower(*dir, VisionTowerKind::clip, Precision::f32);
  ASSERT_TRUE(tower.has_value()) << tower.status().to_string();
  const double h = 64, inter = 128, n = 17, patch = 16 * 192 * 64;
  const double per_layer = (4 * h * h + 2 * h * inter) * n + 2 * n * n * h;
  EXPECT_DOUBLE_EQ((*tower)->flops_per_view(2), 2 * (patch + 2 * per_layer));
  auto model = models::load_dual_encoder(*dir, Precision::f32);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  EXPECT_DOUBLE_EQ(model->image->flops_per_image(), 2 * (patch + 3 * per_layer) + 2 * h * 48);
  const double th = 48, ti = 96, len = 10;
  EXPECT_DOUBLE_EQ(model->text->flops(10),
                   2 * (2 * ((4 * th * th + 2 * th * ti) * len + len * (len + 1) * th) + th * 48 * len));
}

// ---- load errors -----------------------------------------------------------------------------

TEST(VisionLoad, BrokenCheckpointsGiveClearErrors) {
  struct Case {
    const char* name;
    const Family& family;
    test::CheckpointEdit edit;
    StatusCode code;
    std::vector<std::string> mentions;  // all in the message
  };
  const Case cases[] = {
      {"missing_tower_tensor", kFamilies[0], {.drop = "vision_model.encoder.layers.1.mlp.fc1.bias"},
       StatusCode::not_found, {"vision_model.encoder.layers.1.mlp.fc1.bias"}},
      {"missing_class_embedding", kFamilies[0], {.drop = "vision_model.embeddings.class_embedding"},
       StatusCode::not_found, {"vision_model.embeddings.class_embedding"}},
      {"missing_projection", kFamilies[0], {.drop = "visual_projection.weight"}, StatusCode::not_found,
       {"visual_projection.weight"}},
      {"missing_text_norm", kFamilies[1], {.drop = "text_model.final_layer_norm.weight"}, StatusCode::not_found,
       {"text_model.final_layer_norm.weight"}},
      {"missing_head", kFamilies[1], {.drop = "vision_model.head.probe"}, StatusCode::not_found,
       {"vision_model.head.probe"}},
      {"missing_head_mlp", kFamilies[1], {.drop = "vision_model.head.mlp.fc2.weight"}, StatusCode::not_found,
       {"vision_model.head.mlp.fc2.weight"}},
      {"misshapen_tensor", kFamilies[1], {.transpose = "vision_model.encoder.layers.0.mlp.fc1.weight"},
       StatusCode::invalid_argument, {"vision_model.encoder.layers.0.mlp.fc1.weight", "[160, 64]", "[64, 160]"}},
      {"unknown_activation", kFamilies[0],
       {.config_from = "\"hidden_act\": \"quick_gelu\"", .config_to = "\"hidden_act\": \"swish\""},
       StatusCode::invalid_argument, {"swish"}},
      {"bad_heads", kFamilies[1],
       {.config_from = "\"num_attention_heads\": 4", .config_to = "\"num_attention_heads\": 5"},
       StatusCode::invalid_argument, {"num_attention_heads"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto src_dir = generated_dir(c.family);
    ASSERT_TRUE(src_dir.has_value()) << src_dir.status().to_string();
    auto dir = test::write_edited_checkpoint(std::string("vision_family_") + c.name, *src_dir, c.edit);
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    auto model = models::load_dual_encoder(*dir, Precision::f32);
    ASSERT_FALSE(model.has_value());
    const Status s = model.status();
    std::cout << "[ error    ] " << c.name << ": " << s.to_string() << "\n";
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    for (const std::string& m : c.mentions)
      EXPECT_NE(s.message().find(m), std::string::npos) << m << " in " << s.to_string();
  }
}

TEST(VisionLoad, OnlyClipAndSiglipAreDualEncoders) {
  auto src_dir = generated_dir(kFamilies[0]);
  ASSERT_TRUE(src_dir.has_value()) << src_dir.status().to_string();
  auto dir = test::write_edited_checkpoint(
      "vision_family_llava_type", *src_dir,
      {.config_from = "\"model_type\": \"clip\"", .config_to = "\"model_type\": \"llava\""});
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  EXPECT_FALSE(models::is_dual_encoder(*dir));
  auto model = models::load_dual_encoder(*dir, Precision::f32);
  ASSERT_FALSE(model.has_value());
  EXPECT_EQ(model.status().code(), StatusCode::unimplemented) << model.status().to_string();
  const std::string missing = test::scratch_dir("vision_family_empty") + "/nothing";
  EXPECT_FALSE(models::is_dual_encoder(missing));
  auto none = models::load_dual_encoder(missing, Precision::f32);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.status().code(), StatusCode::not_found) << none.status().to_string();
}

}  // namespace
}  // namespace prism

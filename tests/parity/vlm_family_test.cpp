// Parity of the vision-language families (models/vlm) with tests/reference/vlm_family.py.
// For LLaVA-1.5 in both parameter layouts (transformers < 4.52 and >= 4.52) and for
// Idefics3 / SmolVLM, the generator writes a tiny random Hugging Face directory and
// reference.safetensors: two pixel views, their projector outputs, and a prompt whose
// image-token positions hold those rows, with float64 logits at every position and a
// 12-token greedy continuation. This test loads both halves as a deployment would, encodes
// the views, splices the rows into the batch as input embeddings (token id -1) and runs the
// language model against a paged KV cache: the prompt in one step, then cut inside an image
// block, then greedy decoding. Plus the pixel shuffle alone, the encoder's sizes and flops,
// and the loaders' errors.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/file.h"
#include "configs/vlm_config.h"
#include "formats/safetensors.h"
#include "models/vision/vision_tower.h"
#include "models/vlm/pixel_shuffle.h"
#include "models/vlm/vision_language.h"
#include "models/vlm/vlm_weight_names.h"
#include "runtime/ops.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism {
namespace {

using models::Decoder;
using models::DecoderBatch;
using models::KvLayer;
using models::MediaEncoder;
using ops::Precision;

constexpr char kScript[] = "vlm_family.py";
constexpr int kBlockSize = 16;
constexpr int kNumGenerated = 12;

struct Family {
  const char* name;  // the generated directory's name and the test's
  const char* args;  // vlm_family.py arguments
  int32_t image_token_id;
  int64_t grid_side;  // rows per view = grid_side²
  int64_t image_size;
  int64_t hidden_size;
};

const Family kFamilies[] = {
    {"llava_old", "write --family llava --layout old", 150, 4, 28, 64},
    {"llava_new", "write --family llava --layout new", 150, 4, 28, 64},
    {"idefics3", "write --family idefics3", 100, 2, 28, 64},
};

void PrintTo(const Family& family, std::ostream* os) { *os << family.name; }
std::string family_name(const ::testing::TestParamInfo<Family>& info) { return info.param.name; }

Result<std::string> generated_dir(const Family& family) {
  return test::generate_reference(kScript, std::string("vlm_family_") + family.name, family.args);
}

// What reference.safetensors holds, zero-copy.
struct Reference {
  Tensor pixel_values;         // [V, 3, S, S] f32
  Tensor vision_features;      // [V * rows_in, width] f32
  Tensor projector_outputs;    // [V * rows, hidden] f32
  Tensor token_ids;            // [T] i32
  Tensor logits;               // [T, vocab] f32
  Tensor generated;            // [12] i32
  Tensor continuation_logits;  // [12, vocab] f32
  std::vector<int32_t> prompt() const {
    return {token_ids.data<int32_t>(), token_ids.data<int32_t>() + token_ids.size(0)};
  }
};

Result<Reference> read_reference(const std::string& dir) {
  PRISM_ASSIGN_OR_RETURN(auto file, test::open_reference(dir));
  Reference r;
  PRISM_ASSIGN_OR_RETURN(r.pixel_values, file->get("pixel_values"));
  PRISM_ASSIGN_OR_RETURN(r.vision_features, file->get("vision_features"));
  PRISM_ASSIGN_OR_RETURN(r.projector_outputs, file->get("projector_outputs"));
  PRISM_ASSIGN_OR_RETURN(r.token_ids, file->get("token_ids"));
  PRISM_ASSIGN_OR_RETURN(r.logits, file->get("logits"));
  PRISM_ASSIGN_OR_RETURN(r.generated, file->get("generated"));
  PRISM_ASSIGN_OR_RETURN(r.continuation_logits, file->get("continuation_logits"));
  return r;
}

struct Loaded {
  std::string dir;
  std::unique_ptr<Decoder> lm;
  std::unique_ptr<MediaEncoder> encoder;
  Reference ref;
};

Result<Loaded> load(const Family& family, Precision precision) {
  Loaded l;
  PRISM_ASSIGN_OR_RETURN(l.dir, generated_dir(family));
  PRISM_ASSIGN_OR_RETURN(l.lm, models::load_vlm_language_model(l.dir, precision));
  PRISM_ASSIGN_OR_RETURN(l.encoder, models::load_vlm_media_encoder(l.dir, precision));
  PRISM_ASSIGN_OR_RETURN(l.ref, read_reference(l.dir));
  return l;
}

void report(const std::string& tag, const std::string& what, const std::string& value) {
  std::cout << "[ parity   ] " << tag << " " << what << ": " << value << "\n";
  ::testing::Test::RecordProperty(tag + " " + what, value);
}

// One sequence's paged KV cache, its blocks handed out from the top down (a model that
// assumed ascending blocks would read garbage), as the engine's pool might.
struct SeqCache {
  std::vector<KvLayer> layers;
  std::vector<int32_t> table;

  SeqCache(const models::KvSpec& spec, int64_t max_tokens, DType dtype) {
    const int64_t num_blocks = (max_tokens + kBlockSize - 1) / kBlockSize;
    for (int64_t b = 0; b < num_blocks; ++b) table.push_back(int32_t(num_blocks - 1 - b));
    for (int l = 0; l < spec.num_layers; ++l) {
      const Dims shape{num_blocks, kBlockSize, spec.num_kv_heads, spec.head_dim};
      layers.push_back({Tensor::zeros(shape, dtype), Tensor::zeros(shape, dtype), {}, {}});
    }
  }
};

// Positions [start, start + ids.size()) of the sequence, logits for every row. Rows whose id
// is image_token_id take the next rows of `media` (from *next_media_row on) as the engine
// splices them: token id -1 and the row in input_embeddings.
DecoderBatch make_batch(const SeqCache& cache, const std::vector<int32_t>& ids, int32_t start, int32_t image_token_id,
                        const Tensor& media, int64_t* next_media_row, int64_t hidden) {
  const int64_t t = int64_t(ids.size());
  std::vector<int32_t> tokens, positions, slots, rows;
  Tensor embeddings = Tensor::zeros({t, hidden}, DType::f32);
  bool spliced = false;
  for (int64_t i = 0; i < t; ++i) {
    const int32_t pos = start + int32_t(i);
    if (ids[i] == image_token_id && media.defined()) {
      tokens.push_back(-1);
      embeddings.select(0, i).copy_from(media.select(0, (*next_media_row)++));
      spliced = true;
    } else {
      tokens.push_back(ids[i]);
    }
    positions.push_back(pos);
    slots.push_back(cache.table[pos / kBlockSize] * kBlockSize + pos % kBlockSize);
    rows.push_back(int32_t(i));
  }
  DecoderBatch b;
  b.token_ids = Tensor::from<int32_t>(tokens, {t});
  if (spliced) b.input_embeddings = embeddings;
  b.positions = Tensor::from<int32_t>(positions, {t});
  b.cu_seqlens_q = Tensor::from<int32_t>({0, int32_t(t)}, {2});
  b.slot_mapping = Tensor::from<int32_t>(slots, {t});
  b.block_tables = Tensor::from<int32_t>(cache.table, {1, int64_t(cache.table.size())});
  b.context_lens = Tensor::from<int32_t>({start + int32_t(t)}, {1});
  b.logits_rows = Tensor::from<int32_t>(rows, {t});
  return b;
}

int32_t argmax_row(const Tensor& logits, int64_t row) {
  const float* p = logits.data<float>() + row * logits.size(1);
  return int32_t(std::max_element(p, p + logits.size(1)) - p);
}

// What greedy decoding after a prefill measured against the reference's continuation.
struct DecodeRun {
  int64_t agree = 0;
  bool identical = true;
  test::ErrorStats worst;
};

// 12 decode steps after the prompt (prefill_logits: its last row is the prompt's last),
// each fed its own argmax (teacher_forced: the reference's token instead).
DecodeRun decode(Decoder& lm, SeqCache& cache, const Reference& ref, const Tensor& prefill_logits,
                 bool teacher_forced) {
  DecodeRun run;
  const int64_t vocab = ref.logits.size(1);
  const int32_t prompt_len = int32_t(ref.token_ids.size(0));
  const int32_t* want = ref.generated.data<int32_t>();
  int32_t next = argmax_row(prefill_logits, prefill_logits.size(0) - 1);
  for (int64_t j = 0; j < kNumGenerated; ++j) {
    run.agree += next == want[j];
    run.identical &= next == want[j];
    const int32_t fed = teacher_forced ? want[j] : next;
    int64_t unused = 0;
    const Tensor logits = lm.forward(make_batch(cache, {fed}, prompt_len + int32_t(j), -2, Tensor(), &unused,
                                                lm.hidden_size()),
                                     cache.layers);
    const test::ErrorStats e = test::compare(logits, ref.continuation_logits.select(0, j).view({1, vocab}));
    if (e.rel_error > run.worst.rel_error) run.worst = e;
    next = argmax_row(logits, 0);
  }
  return run;
}

// ---- fp32: the ARCHITECTURE.md section 5 bar ----------------------------------------------

// NOTE: the reference is float64 on the stored weights; the generator asserts a top-2 margin
// of at least 0.05 along the greedy path (logits span ~25), so f32 cannot flip a choice.
constexpr double kF32Bound = 1e-4;

class VlmFamilyF32 : public ::testing::TestWithParam<Family> {};

TEST_P(VlmFamilyF32, ProjectorOutputsMatch) {
  const Family& family = GetParam();
  auto loaded = load(family, Precision::f32);
  ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
  const MediaEncoder& encoder = *loaded->encoder;
  const Reference& ref = loaded->ref;
  EXPECT_EQ(encoder.image_size(), family.image_size);
  EXPECT_EQ(encoder.grid_side(), family.grid_side);
  EXPECT_EQ(encoder.output_size(), family.hidden_size);

  const Tensor rows = encoder.encode(ref.pixel_values);
  ASSERT_EQ(rows.shape(), ref.projector_outputs.shape());
  const std::string tag = std::string(family.name) + " f32";
  report(tag, "projector outputs", test::compare(rows, ref.projector_outputs).to_string());
  EXPECT_TRUE(test::rel_error_within(rows, ref.projector_outputs, kF32Bound)) << tag;

  // Views are independent: each alone gives its rows of the batch.
  const int64_t per_view = family.grid_side * family.grid_side;
  for (int64_t v = 0; v < ref.pixel_values.size(0); ++v) {
    const Tensor alone = encoder.encode(ref.pixel_values.slice(0, v, v + 1).contiguous());
    EXPECT_TRUE(test::rel_error_within(alone, rows.slice(0, v * per_view, (v + 1) * per_view), 1e-6))
        << tag << " view " << v;
  }
}

TEST_P(VlmFamilyF32, SplicedPromptLogitsAndGreedyDecodeMatch) {
  const Family& family = GetParam();
  auto loaded = load(family, Precision::f32);
  ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
  Decoder& lm = *loaded->lm;
  const Reference& ref = loaded->ref;
  EXPECT_EQ(lm.hidden_size(), family.hidden_size);
  EXPECT_EQ(lm.vocab_size(), ref.logits.size(1));

  const Tensor rows = loaded->encoder->encode(ref.pixel_values);
  const std::vector<int32_t> prompt = ref.prompt();
  SeqCache cache(lm.kv_spec(), int64_t(prompt.size()) + kNumGenerated + 1, DType::f32);
  int64_t next_row = 0;
  const Tensor logits =
      lm.forward(make_batch(cache, prompt, 0, family.image_token_id, rows, &next_row, lm.hidden_size()), cache.layers);
  EXPECT_EQ(next_row, rows.size(0)) << "every row spliced once";
  const std::string tag = std::string(family.name) + " f32";
  report(tag, "prompt logits", test::compare(logits, ref.logits).to_string());
  EXPECT_TRUE(test::rel_error_within(logits, ref.logits, kF32Bound)) << tag;

  const DecodeRun run = decode(lm, cache, ref, logits, false);
  report(tag, "greedy decode", std::to_string(run.agree) + "/" + std::to_string(kNumGenerated) +
                                   " tokens equal; worst step logits " + run.worst.to_string());
  EXPECT_TRUE(run.identical) << tag << ": the greedy continuation differs";
  EXPECT_LE(run.worst.rel_error, kF32Bound) << tag << " " << run.worst.to_string();
}

// The prompt in two steps cut in the middle of the first image's rows: the second attends
// the cached first half, rows included, and the logits equal the reference's.
TEST_P(VlmFamilyF32, ChunkCuttingAnImageMatches) {
  const Family& family = GetParam();
  auto loaded = load(family, Precision::f32);
  ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
  Decoder& lm = *loaded->lm;
  const Reference& ref = loaded->ref;
  const Tensor rows = loaded->encoder->encode(ref.pixel_values);
  const std::vector<int32_t> prompt = ref.prompt();
  const auto first_image = std::find(prompt.begin(), prompt.end(), family.image_token_id);
  ASSERT_NE(first_image, prompt.end());
  const int32_t cut = int32_t(first_image - prompt.begin()) + int32_t(family.grid_side * family.grid_side / 2);
  SeqCache cache(lm.kv_spec(), int64_t(prompt.size()) + 1, DType::f32);
  int64_t next_row = 0;
  const Tensor a = lm.forward(make_batch(cache, {prompt.begin(), prompt.begin() + cut}, 0, family.image_token_id, rows,
                                         &next_row, lm.hidden_size()),
                              cache.layers);
  const Tensor b = lm.forward(make_batch(cache, {prompt.begin() + cut, prompt.end()}, cut, family.image_token_id, rows,
                                         &next_row, lm.hidden_size()),
                              cache.layers);
  const int64_t t = int64_t(prompt.size());
  EXPECT_TRUE(test::rel_error_within(a, ref.logits.slice(0, 0, cut), kF32Bound)) << family.name << " first chunk";
  EXPECT_TRUE(test::rel_error_within(b, ref.logits.slice(0, cut, t), kF32Bound)) << family.name << " second chunk";
}

INSTANTIATE_TEST_SUITE_P(Families, VlmFamilyF32, ::testing::ValuesIn(kFamilies), family_name);

// ---- bf16 weights: close, greedy mostly agrees -------------------------------------------

// NOTE: bf16 keeps 8 significant bits (2^-9 relative rounding per weight and activation);
// through a 2–3 layer tower, the projector and a 2-layer LM the outputs move by a few 1e-3
// of their range, as the Llama family's bf16 bound (4e-2) allows with room.
TEST(VlmFamilyBf16, StaysClose) {
  for (const Family& family : {kFamilies[0], kFamilies[2]}) {
    SCOPED_TRACE(family.name);
    auto loaded = load(family, Precision::bf16);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
    const Reference& ref = loaded->ref;
    const std::string tag = std::string(family.name) + " bf16";
    const Tensor rows = loaded->encoder->encode(ref.pixel_values);
    report(tag, "projector outputs", test::compare(rows, ref.projector_outputs).to_string());
    EXPECT_TRUE(test::rel_error_within(rows, ref.projector_outputs, 4e-2));
    Decoder& lm = *loaded->lm;
    SeqCache cache(lm.kv_spec(), ref.token_ids.size(0) + kNumGenerated + 1, DType::bf16);
    int64_t next_row = 0;
    const Tensor logits = lm.forward(
        make_batch(cache, ref.prompt(), 0, family.image_token_id, rows, &next_row, lm.hidden_size()), cache.layers);
    report(tag, "prompt logits", test::compare(logits, ref.logits).to_string());
    EXPECT_TRUE(test::rel_error_within(logits, ref.logits, 4e-2));
    const DecodeRun run = decode(lm, cache, ref, logits, true);
    report(tag, "teacher-forced greedy agreement", std::to_string(run.agree) + "/" + std::to_string(kNumGenerated));
    EXPECT_GE(run.agree, kNumGenerated - 2);
  }
}

// ---- pieces --------------------------------------------------------------------------------

// Output row (i, j) of a view holds, at feature (a * s + c) * D + d, input row
// (i * s + a) * side + j * s + c, feature d (Idefics3Connector.pixel_shuffle).
TEST(PixelShuffle, MovesEachBlockIntoOneRow) {
  const int64_t views = 2, side = 4, scale = 2, d = 3, out_side = side / scale;
  std::vector<float> values;
  for (int64_t i = 0; i < views * side * side * d; ++i) values.push_back(float(i));
  const Tensor x = Tensor::from<float>(values, {views * side * side, d});
  const Tensor y = models::pixel_shuffle(x, views, side, scale);
  ASSERT_EQ(y.shape(), (Dims{views * out_side * out_side, scale * scale * d}));
  for (int64_t v = 0; v < views; ++v)
    for (int64_t i = 0; i < out_side; ++i)
      for (int64_t j = 0; j < out_side; ++j)
        for (int64_t a = 0; a < scale; ++a)
          for (int64_t c = 0; c < scale; ++c)
            for (int64_t f = 0; f < d; ++f) {
              const int64_t in_row = v * side * side + (i * scale + a) * side + j * scale + c;
              const int64_t out_row = v * out_side * out_side + i * out_side + j;
              EXPECT_EQ(y.data<float>()[out_row * y.size(1) + (a * scale + c) * d + f],
                        x.data<float>()[in_row * d + f]);
            }
}

// flops_per_view: the tower up to the feature layer plus the projector's GEMMs.
TEST(VlmMediaEncoder, FlopsAreTheTowersAndTheProjectors) {
  auto dir = generated_dir(kFamilies[0]);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto encoder = models::load_vlm_media_encoder(*dir, Precision::f32);
  ASSERT_TRUE(encoder.has_value()) << encoder.status().to_string();
  auto config = configs::VlmConfig::load(*dir);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  auto tower_config = config->vision_tower();
  ASSERT_TRUE(tower_config.has_value()) << tower_config.status().to_string();
  auto weights = formats::WeightSource::open(*dir);
  ASSERT_TRUE(weights.has_value()) << weights.status().to_string();
  auto tower = models::VisionTower::load(*weights, "vision_tower.vision_model.", *tower_config, Precision::f32, 2);
  ASSERT_TRUE(tower.has_value()) << tower.status().to_string();
  const double rows = 16, hv = 64, h = 64;  // 4 × 4 patches, CLIP width 64, LM width 64
  EXPECT_DOUBLE_EQ((*encoder)->flops_per_view(), (*tower)->flops_per_view(2) + 2 * rows * (hv * h + h * h));
  EXPECT_GT((*tower)->flops_per_view(2), 0.0);

  auto idefics3 = generated_dir(kFamilies[2]);
  ASSERT_TRUE(idefics3.has_value()) << idefics3.status().to_string();
  auto shuffled = models::load_vlm_media_encoder(*idefics3, Precision::f32);
  ASSERT_TRUE(shuffled.has_value()) << shuffled.status().to_string();
  EXPECT_GT((*shuffled)->flops_per_view(), 2.0 * 4 * (64 * 4) * 64);  // the projection alone
}

// The last CLIP layer is never run for vision_feature_layer -2, so it is not loaded: a
// checkpoint without it still encodes the same rows.
TEST(VlmMediaEncoder, LlavaLoadsOnlyTheLayersItRuns) {
  auto src = generated_dir(kFamilies[0]);
  ASSERT_TRUE(src.has_value()) << src.status().to_string();
  auto dir = test::write_edited_checkpoint("vlm_family_no_last_layer", *src,
                                           {.drop = "vision_tower.vision_model.encoder.layers.2.mlp.fc1.weight"});
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto encoder = models::load_vlm_media_encoder(*dir, Precision::f32);
  ASSERT_TRUE(encoder.has_value()) << encoder.status().to_string();
  auto ref = read_reference(*src);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  EXPECT_TRUE(test::rel_error_within((*encoder)->encode(ref->pixel_values), ref->projector_outputs, kF32Bound));
}

TEST(VlmConfig, OmittedKeysTakeTransformersDefaults) {
  auto dir = generated_dir(kFamilies[0]);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto config = configs::VlmConfig::load(*dir);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  EXPECT_EQ(config->family, configs::VlmFamily::llava);
  EXPECT_EQ(config->image_token_id, 150);
  EXPECT_EQ(config->vision_feature_layer, -2);
  auto text = config->text_model();
  ASSERT_TRUE(text.has_value()) << text.status().to_string();
  EXPECT_EQ(text->max_position_embeddings, 2048);  // LlamaConfig's default: the file omits it
  EXPECT_DOUBLE_EQ(text->rms_norm_eps, 1e-6);
  auto tower = config->vision_tower();
  ASSERT_TRUE(tower.has_value()) << tower.status().to_string();
  EXPECT_EQ(tower->hidden_act, "quick_gelu");  // CLIPVisionConfig's default
  EXPECT_DOUBLE_EQ(tower->layer_norm_eps, 1e-5);
  EXPECT_EQ(tower->kind, configs::VisionTowerKind::clip);

  auto idefics3 = generated_dir(kFamilies[2]);
  ASSERT_TRUE(idefics3.has_value()) << idefics3.status().to_string();
  auto c3 = configs::VlmConfig::load(*idefics3);
  ASSERT_TRUE(c3.has_value()) << c3.status().to_string();
  EXPECT_EQ(c3->family, configs::VlmFamily::idefics3);
  EXPECT_EQ(c3->scale_factor, 2);
  EXPECT_EQ(c3->tower_kind, configs::VisionTowerKind::siglip);
  auto text3 = c3->text_model();  // its text_config names VLlama3ForCausalLM: not a refusal
  ASSERT_TRUE(text3.has_value()) << text3.status().to_string();
  EXPECT_EQ(text3->max_position_embeddings, 8192);
}

TEST(VlmConfig, TellsVisionLanguageModelsApart) {
  for (const Family& family : kFamilies) {
    auto dir = generated_dir(family);
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    EXPECT_TRUE(models::is_vision_language_model(*dir)) << family.name;
  }
  const std::string llm = test::scratch_dir("vlm_family_llm");
  ASSERT_TRUE(write_file(llm + "/config.json", R"({"model_type": "llama"})").ok());
  EXPECT_FALSE(models::is_vision_language_model(llm));
  EXPECT_FALSE(models::is_vision_language_model(llm + "/missing"));
  const std::string broken = test::scratch_dir("vlm_family_broken_json");
  ASSERT_TRUE(write_file(broken + "/config.json", "{\"model_type\": ").ok());
  EXPECT_FALSE(models::is_vision_language_model(broken));
}

// ---- load errors -----------------------------------------------------------------------------

enum class Half { language_model, media_encoder };

struct ErrorCase {
  const char* name;
  int family;  // index into kFamilies
  test::CheckpointEdit edit;
  Half half;
  StatusCode code;
  std::vector<std::string> mentions;  // all in the message
};

TEST(VlmLoad, BrokenCheckpointsGiveClearErrors) {
  const ErrorCase cases[] = {
      {"lm_missing_tensor", 0, {.drop = "language_model.model.layers.1.mlp.up_proj.weight"}, Half::language_model,
       StatusCode::not_found, {"language_model.model.layers.1.mlp.up_proj.weight"}},
      {"lm_missing_head_new_layout", 1, {.drop = "lm_head.weight"}, Half::language_model, StatusCode::not_found,
       {"lm_head.weight"}},
      {"no_language_model", 0, {.drop = "language_model.model.embed_tokens.weight"}, Half::language_model,
       StatusCode::not_found, {"language_model.model.embed_tokens.weight", "model.language_model.embed_tokens.weight"}},
      {"projector_missing", 0, {.drop = "multi_modal_projector.linear_2.weight"}, Half::media_encoder,
       StatusCode::not_found, {"multi_modal_projector.linear_2.weight"}},
      {"tower_missing", 1, {.drop = "model.vision_tower.vision_model.encoder.layers.1.self_attn.q_proj.weight"},
       Half::media_encoder, StatusCode::not_found, {"model.vision_tower.vision_model.encoder.layers.1.self_attn.q_proj"}},
      {"connector_transposed", 2, {.transpose = "model.connector.modality_projection.proj.weight"},
       Half::media_encoder, StatusCode::invalid_argument, {"model.connector.modality_projection.proj.weight"}},
      {"feature_layer_out_of_range",
       0,
       {.config_from = "\"vision_feature_layer\": -2", .config_to = "\"vision_feature_layer\": -5"},
       Half::media_encoder,
       StatusCode::invalid_argument,
       {"vision_feature_layer -5", "-4 .. 3", "config.json"}},
      {"feature_layer_past_the_tower",
       0,
       {.config_from = "\"vision_feature_layer\": -2", .config_to = "\"vision_feature_layer\": 4"},
       Half::media_encoder,
       StatusCode::invalid_argument,
       {"vision_feature_layer 4"}},
      {"feature_layer_list",
       0,
       {.config_from = "\"vision_feature_layer\": -2", .config_to = "\"vision_feature_layer\": [-2, -1]"},
       Half::media_encoder,
       StatusCode::unimplemented,
       {"vision_feature_layer"}},
      {"full_strategy",
       0,
       {.config_from = "\"vision_feature_select_strategy\": \"default\"",
        .config_to = "\"vision_feature_select_strategy\": \"full\""},
       Half::media_encoder,
       StatusCode::unimplemented,
       {"'full'", "17 rows"}},
      {"unknown_projector_act",
       0,
       {.config_from = "\"projector_hidden_act\": \"gelu\"", .config_to = "\"projector_hidden_act\": \"swish2\""},
       Half::media_encoder,
       StatusCode::unimplemented,
       {"projector_hidden_act", "swish2"}},
      {"unknown_text_model",
       0,
       {.config_from = "\"model_type\": \"llama\"", .config_to = "\"model_type\": \"gemma\""},
       Half::language_model,
       StatusCode::unimplemented,
       {"text_config", "gemma"}},
      {"unknown_family",
       2,
       {.config_from = "\"model_type\": \"idefics3\"", .config_to = "\"model_type\": \"idefics2\""},
       Half::media_encoder,
       StatusCode::unimplemented,
       {"idefics2"}},
      {"connector_missing", 2, {.drop = "model.connector.modality_projection.proj.weight"}, Half::media_encoder,
       StatusCode::not_found, {"model.connector.modality_projection.proj.weight"}},
      {"scale_factor_not_dividing",
       2,
       {.config_from = "\"scale_factor\": 2", .config_to = "\"scale_factor\": 3"},
       Half::media_encoder,
       StatusCode::invalid_argument,
       {"scale_factor 3", "4-patch"}},
      {"text_model_missing", 2, {.drop = "model.text_model.norm.weight"}, Half::language_model, StatusCode::not_found,
       {"model.text_model.norm.weight"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto src = generated_dir(kFamilies[c.family]);
    ASSERT_TRUE(src.has_value()) << src.status().to_string();
    auto dir = test::write_edited_checkpoint(std::string("vlm_family_") + c.name, *src, c.edit);
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    const Status s = c.half == Half::language_model
                         ? models::load_vlm_language_model(*dir, Precision::f32).status()
                         : models::load_vlm_media_encoder(*dir, Precision::f32).status();
    std::cout << "[ error    ] " << c.name << ": " << s.to_string() << "\n";
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    EXPECT_NE(s.message().find(*dir), std::string::npos) << "names the directory: " << s.to_string();
    for (const std::string& m : c.mentions)
      EXPECT_NE(s.message().find(m), std::string::npos) << m << " in " << s.to_string();
  }
}

TEST(VlmLoad, MissingDirectoryIsNotFound) {
  const std::string dir = test::scratch_dir("vlm_family_empty") + "/nothing";
  EXPECT_EQ(models::load_vlm_language_model(dir, Precision::f32).status().code(), StatusCode::not_found);
  EXPECT_EQ(models::load_vlm_media_encoder(dir, Precision::f32).status().code(), StatusCode::not_found);
}

}  // namespace
}  // namespace prism

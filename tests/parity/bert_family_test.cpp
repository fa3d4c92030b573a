// Parity of the BERT-family encoders (models/bert, models/pooling, configs/sentence_embedding)
// with tests/reference/bert_family.py. For every real layout (bert-base-uncased, MiniLM, BGE,
// E5, GTE, XLM-R) the generator writes a tiny random Hugging Face directory (config.json,
// weights under the family's real names, sentence-transformers files, tokenizer) and
// reference.safetensors: five sequences (5, 17, 2, 9 and max_tokens = 64 tokens) back to back
// with their float64 last hidden states and pooled (+ normalised) embeddings. This test loads
// the directory as a deployment would and compares, packed and padded, at each precision.
// Plus the loader's errors on broken checkpoints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/file.h"
#include "configs/sentence_embedding.h"
#include "formats/safetensors.h"
#include "models/bert/bert.h"
#include "models/pooling.h"
#include "runtime/arena.h"
#include "runtime/ops.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"
#include "text/tokenizer.h"

namespace prism {
namespace {

using models::EncoderBatch;
using configs::Pooling;
using ops::Precision;

constexpr char kScript[] = "bert_family.py";

struct Layout {
  const char* name;  // the generated directory's name and the test's
  const char* args;  // bert_family.py arguments
  Pooling pooling;   // what the layout's files say (checked against the reader)
  bool normalize;
};

// Every family, plus the loader paths a real checkpoint can take: sharded weights, bf16
// storage, the *ForMaskedLM "roberta." prefix with head tensors, last-token pooling.
const Layout kLayouts[] = {
    {"bert", "--layout bert", Pooling::mean, false},  // "bert." prefix, gamma/beta, cls.* tensors
    {"minilm", "--layout minilm", Pooling::mean, true},
    {"bge_sharded", "--layout bge --max-shard-bytes 1500000", Pooling::cls, true},
    {"e5", "--layout e5", Pooling::mean, true},
    {"e5_lasttoken_bf16_weights", "--layout e5 --pooling lasttoken --weight-dtype bf16", Pooling::last_token, true},
    {"gte", "--layout gte", Pooling::mean, false},
    {"xlmr", "--layout xlmr", Pooling::mean, true},
    {"xlmr_masked_lm", "--layout xlmr --masked-lm", Pooling::mean, true},
};

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.name; }

Result<std::string> generated_dir(const Layout& layout) {
  return test::generate_reference(kScript, std::string("bert_family_") + layout.name, layout.args);
}

// What reference.safetensors holds, zero-copy.
struct Reference {
  Tensor token_ids;   // [T] i32
  Tensor cu_seqlens;  // [S + 1] i32
  Tensor hidden;      // [T, H] f32
  Tensor embeddings;  // [S, H] f32: pooled, normalised when the layout normalises
};

Result<Reference> read_reference(const std::string& dir) {
  PRISM_ASSIGN_OR_RETURN(auto file, test::open_reference(dir));
  Reference r;
  PRISM_ASSIGN_OR_RETURN(r.token_ids, file->get("token_ids"));
  PRISM_ASSIGN_OR_RETURN(r.cu_seqlens, file->get("cu_seqlens"));
  PRISM_ASSIGN_OR_RETURN(r.hidden, file->get("hidden"));
  PRISM_ASSIGN_OR_RETURN(r.embeddings, file->get("embeddings"));
  return r;
}

// The padded layout of the same sequences: each in a slot of the longest one's length, the
// rest of the slot filled with pad_id, kv_lens the real lengths. real_rows maps every real
// token (in packed order) to its row in the padded batch.
struct PaddedBatch {
  EncoderBatch batch;
  std::vector<int64_t> real_rows;
};

PaddedBatch pad_batch(const Reference& ref, int32_t pad_id) {
  const int32_t* cu = ref.cu_seqlens.data<int32_t>();
  const int32_t* ids = ref.token_ids.data<int32_t>();
  const int64_t num_seqs = ref.cu_seqlens.size(0) - 1;
  int32_t slot = 0;
  for (int64_t s = 0; s < num_seqs; ++s) slot = std::max(slot, cu[s + 1] - cu[s]);
  PaddedBatch p;
  p.batch.token_ids = Tensor::empty({num_seqs * slot}, DType::i32);
  p.batch.cu_seqlens = Tensor::empty({num_seqs + 1}, DType::i32);
  p.batch.kv_lens = Tensor::empty({num_seqs}, DType::i32);
  int32_t* pids = p.batch.token_ids.data<int32_t>();
  for (int64_t s = 0; s <= num_seqs; ++s) p.batch.cu_seqlens.data<int32_t>()[s] = int32_t(s * slot);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t len = cu[s + 1] - cu[s];
    p.batch.kv_lens.data<int32_t>()[s] = len;
    for (int32_t i = 0; i < slot; ++i) pids[s * slot + i] = i < len ? ids[cu[s] + i] : pad_id;
    for (int32_t i = 0; i < len; ++i) p.real_rows.push_back(s * slot + i);
  }
  return p;
}

Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  Tensor out = Tensor::empty({int64_t(rows.size()), x.size(1)}, DType::f32);
  for (size_t i = 0; i < rows.size(); ++i) out.select(0, int64_t(i)).copy_from(x.select(0, rows[i]));
  return out;
}

Tensor embed(const Tensor& hidden, const EncoderBatch& batch, const configs::SentenceEmbeddingConfig& config) {
  Tensor e = models::pool(hidden, batch, config.pooling);
  if (config.normalize) models::l2_normalize_rows(e);
  return e;
}

// Per-row cosine similarity of two [S, H] tensors: {min, mean}.
std::pair<double, double> cosine_min_mean(const Tensor& a, const Tensor& b) {
  double lowest = 1.0, sum = 0.0;
  for (int64_t s = 0; s < a.size(0); ++s) {
    const float* x = a.data<float>() + s * a.size(1);
    const float* y = b.data<float>() + s * b.size(1);
    double xy = 0, xx = 0, yy = 0;
    for (int64_t i = 0; i < a.size(1); ++i) {
      xy += double(x[i]) * y[i];
      xx += double(x[i]) * x[i];
      yy += double(y[i]) * y[i];
    }
    const double c = xy / std::sqrt(xx * yy);
    lowest = std::min(lowest, c);
    sum += c;
  }
  return {lowest, sum / double(a.size(0))};
}

void report(const std::string& tag, const std::string& what, const std::string& value) {
  std::cout << "[ parity   ] " << tag << " " << what << ": " << value << "\n";
  ::testing::Test::RecordProperty(tag + " " + what, value);
}

// ---- fp32: the ARCHITECTURE.md section 5 bar ----------------------------------------------

// NOTE: the reference is float64 on the stored weights, so the error is the C++ side's f32
// rounding: a few ulps per op over ~30 ops (2 layers), far under 1e-4 of the range.
constexpr double kF32Bound = 1e-4;

class BertFamilyF32 : public ::testing::TestWithParam<Layout> {};

TEST_P(BertFamilyF32, MatchesReferencePackedAndPadded) {
  const Layout& layout = GetParam();
  auto dir = generated_dir(layout);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto config = configs::read_sentence_embedding_config(*dir);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  EXPECT_EQ(config->pooling, layout.pooling) << config->source;
  EXPECT_EQ(config->normalize, layout.normalize) << config->source;
  auto bert_config = configs::BertConfig::load(*dir);
  ASSERT_TRUE(bert_config.has_value()) << bert_config.status().to_string();
  auto encoder = models::load_bert(*dir, Precision::f32);
  ASSERT_TRUE(encoder.has_value()) << encoder.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  EXPECT_EQ((*encoder)->max_tokens(), 64);
  EXPECT_EQ((*encoder)->hidden_size(), ref->hidden.size(1));

  const std::string tag = std::string(layout.name) + " f32";
  const EncoderBatch packed{ref->token_ids, ref->cu_seqlens, Tensor()};
  const Tensor hidden = (*encoder)->encode(packed);
  ASSERT_EQ(hidden.shape(), ref->hidden.shape());
  report(tag, "packed hidden", test::compare(hidden, ref->hidden).to_string());
  EXPECT_TRUE(test::rel_error_within(hidden, ref->hidden, kF32Bound)) << tag << " packed hidden";
  const Tensor embeddings = embed(hidden, packed, *config);
  report(tag, "packed embeddings", test::compare(embeddings, ref->embeddings).to_string());
  EXPECT_TRUE(test::rel_error_within(embeddings, ref->embeddings, kF32Bound)) << tag << " packed embeddings";

  // Padded slots: the padding is masked out of attention and pooling, so the real tokens'
  // states and the embeddings are the packed ones to f32 rounding (GEMM blocking may differ).
  const PaddedBatch padded = pad_batch(*ref, int32_t(bert_config->pad_token_id));
  const Tensor padded_hidden = (*encoder)->encode(padded.batch);
  const Tensor real_hidden = gather_rows(padded_hidden, padded.real_rows);
  report(tag, "padded hidden", test::compare(real_hidden, ref->hidden).to_string());
  EXPECT_TRUE(test::rel_error_within(real_hidden, ref->hidden, kF32Bound)) << tag << " padded hidden";
  const Tensor padded_embeddings = embed(padded_hidden, padded.batch, *config);
  EXPECT_TRUE(test::rel_error_within(padded_embeddings, ref->embeddings, kF32Bound)) << tag << " padded embeddings";
  report(tag, "padded vs packed embeddings", test::compare(padded_embeddings, embeddings).to_string());
  EXPECT_TRUE(test::rel_error_within(padded_embeddings, embeddings, 1e-5)) << tag << " padded vs packed";
}

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Layouts, BertFamilyF32, ::testing::ValuesIn(kLayouts), layout_name);

// The directory's tokenizer loads with text/ and speaks the model's vocabulary: its first
// and last tokens are the ones the reference's inputs start and end with, and every id fits
// the embedding table. For XLM-R the Unigram tokenizer the generator writes is checked piece
// by piece, and an unknown character becomes <unk> (3).
class BertFamilyTokenizer : public ::testing::TestWithParam<Layout> {};

TEST_P(BertFamilyTokenizer, LoadsAndFitsTheModel) {
  const Layout& layout = GetParam();
  auto dir = generated_dir(layout);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto tokenizer = text::Tokenizer::load(*dir);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().to_string();
  // all-MiniLM-L6-v2's real tokenizer.json pads every text to 128 tokens (and truncates
  // there): an embedder packs sequences instead, so it turns that off.
  tokenizer->set_padding(std::nullopt);
  auto config = configs::BertConfig::load(*dir);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();

  const text::Encoding e = tokenizer->encode("hello world, bonjour le monde \xE2\x98\x83");
  ASSERT_GE(e.ids.size(), 3u);
  const int32_t* ids = ref->token_ids.data<int32_t>();
  EXPECT_EQ(e.ids.front(), ids[0]);                        // [CLS] / <s>
  EXPECT_EQ(e.ids.back(), ids[ref->token_ids.size(0) - 1]);  // [SEP] / </s>
  for (text::TokenId id : e.ids) EXPECT_LT(int64_t(id), config->vocab_size);
  EXPECT_LE(int64_t(tokenizer->vocab_size()), config->vocab_size);
  if (config->model_type == "xlm-roberta") {
    std::vector<text::TokenId> want = {0};
    for (const char* piece :
         {"\u2581hello", "\u2581world", ",", "\u2581bonjour", "\u2581le", "\u2581monde", "\u2581"}) {
      auto id = tokenizer->token_to_id(piece);
      ASSERT_TRUE(id.has_value()) << piece;
      want.push_back(*id);
    }
    want.push_back(3);  // the snowman: <unk>
    want.push_back(2);
    EXPECT_EQ(e.ids, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BertFamilyTokenizer, ::testing::ValuesIn(kLayouts), layout_name);

// ---- bf16 and int8 linears ----------------------------------------------------------------

// NOTE: the bounds, derived from the precision. One rounded GEMM operand carries a relative
// error of at most u (bf16: 2^-9; int8: half a step of max|row| / 127, i.e. 1/254 of the
// row's range); a product of two, eps = 2u: 2^-8 (bf16) or 1/127 (int8). One linear moves its
// output by ~1 eps of the output's range whatever its length (the per-term errors are
// independent). Along one layer, counted as tests/parity/transformer_block_test.cpp does: q,
// k and v 1 eps, attention ~3 (logits of std ~2 amplify q's and k's errors through the
// softmax), attention.output.dense 3.2, intermediate 3.3, output.dense 3.5 units; the post-LN
// residual carries the layer's input error on. L layers in quadrature: ~3.5 sqrt(L) units,
// 5 for the 2 layers here. The LayerNorms rescale each row to unit rms, so a unit is of the
// order of the rows' rms, ~1/3 of their max for these Gaussian-like rows: the max-normalised
// error (reference_io.h) is ~5/3 eps, and the bound takes a margin of 3 for the tail of the
// max over ~10k values: 5 eps (bf16 0.0195, int8 0.039).
// Embeddings: a relative error r of a vector lowers its cosine by at most r^2 / 2. Pooling
// does not shrink r (the tokens' errors share the same weights' rounding), so with r = 5 eps
// the minimum over the sequences must stay >= 1 - (5 eps)^2 / 2: bf16 0.99981, int8 0.99923,
// tighter than the 0.999 / 0.99 the issue asks of real models.
// Measured at seed 0 over the 8 layouts: hidden bf16 1.3e-3..1.7e-3, int8 5.0e-3..6.7e-3;
// min cosine bf16 >= 0.999998, int8 >= 0.99998. The bounds sit 6-12x above: a wrong scale,
// layout or rounding mode moves these by orders of magnitude, not by 6x.
class BertFamilyQuantised : public ::testing::TestWithParam<Layout> {};

TEST_P(BertFamilyQuantised, Bf16AndInt8WithinPrecision) {
  const Layout& layout = GetParam();
  auto dir = generated_dir(layout);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto config = configs::read_sentence_embedding_config(*dir);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  const EncoderBatch packed{ref->token_ids, ref->cu_seqlens, Tensor()};

  for (Precision precision : {Precision::bf16, Precision::int8}) {
    auto encoder = models::load_bert(*dir, precision);
    ASSERT_TRUE(encoder.has_value()) << encoder.status().to_string();
    const double eps = precision == Precision::bf16 ? std::ldexp(1.0, -8) : 1.0 / 127.0;
    const double hidden_bound = 5.0 * eps;
    const double min_cosine = 1.0 - 0.5 * (5.0 * eps) * (5.0 * eps);
    const std::string tag = std::string(layout.name) + " " + std::string(ops::precision_name(precision));
    const Tensor hidden = (*encoder)->encode(packed);
    report(tag, "hidden",
           test::compare(hidden, ref->hidden).to_string() + " (bound " + std::to_string(hidden_bound) + ")");
    EXPECT_TRUE(test::rel_error_within(hidden, ref->hidden, hidden_bound)) << tag << " hidden";
    const Tensor embeddings = embed(hidden, packed, *config);
    const auto [lowest, mean] = cosine_min_mean(embeddings, ref->embeddings);
    report(tag, "embedding cosine", "min " + std::to_string(lowest) + " mean " + std::to_string(mean) +
                                        " (bound " + std::to_string(min_cosine) + ")");
    EXPECT_GE(lowest, min_cosine) << tag;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BertFamilyQuantised, ::testing::ValuesIn(kLayouts), layout_name);

// ---- the encoder's contract ------------------------------------------------------------------

// Only the result comes from the caller's arena (the layers' activations live in the
// encoder's own, reused ones), and a second call gives the same bits.
TEST(BertEncoder, ResultIsTheOnlyAllocationInTheCallersArenaAndRepeats) {
  auto dir = generated_dir(kLayouts[1]);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto encoder = models::load_bert(*dir, Precision::f32);
  ASSERT_TRUE(encoder.has_value()) << encoder.status().to_string();
  auto ref = read_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  const EncoderBatch packed{ref->token_ids, ref->cu_seqlens, Tensor()};

  Arena arena(size_t(1) << 20);
  ArenaScope scope(&arena);
  const Tensor first = (*encoder)->encode(packed).clone();
  arena.reset();
  const Tensor second = (*encoder)->encode(packed);
  const size_t result_bytes = size_t(second.numel()) * sizeof(float);
  EXPECT_EQ(arena.used_bytes(), result_bytes);
  EXPECT_EQ(test::compare(first, second).max_abs_error, 0.0);
}

TEST(BertEncoder, FlopsCountTheMatmuls) {
  auto dir = generated_dir(kLayouts[1]);  // minilm: H 64, I 128, 2 layers
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto encoder = models::load_bert(*dir, Precision::f32);
  ASSERT_TRUE(encoder.has_value()) << encoder.status().to_string();
  const double h = 64, inter = 128, layers = 2, n = 10;
  EXPECT_DOUBLE_EQ((*encoder)->flops(10), 2 * layers * ((4 * h * h + 2 * h * inter) * n + 2 * n * n * h));
}

// ---- load errors -----------------------------------------------------------------------------

// One table, one generated directory (a parity test process pays one Python run each).
TEST(BertLoad, BrokenCheckpointsGiveClearErrors) {
  auto src_dir = generated_dir(kLayouts[1]);  // minilm: BertModel names, no prefix; H 64, I 128
  ASSERT_TRUE(src_dir.has_value()) << src_dir.status().to_string();
  struct Case {
    const char* name;
    test::CheckpointEdit variant;
    StatusCode code;
    std::vector<std::string> mentions;  // all in the message
  };
  const Case cases[] = {
      {"missing_tensor", {.drop = "encoder.layer.1.attention.self.key.bias"}, StatusCode::not_found,
       {"encoder.layer.1.attention.self.key.bias"}},
      {"missing_layer_norm", {.drop = "embeddings.LayerNorm.weight"}, StatusCode::not_found,
       {"embeddings.LayerNorm.weight"}},
      {"misshapen_tensor", {.transpose = "encoder.layer.0.intermediate.dense.weight"}, StatusCode::invalid_argument,
       {"encoder.layer.0.intermediate.dense.weight", "[128, 64]", "[64, 128]"}},
      {"not_bert", {.drop = "embeddings.word_embeddings.weight"}, StatusCode::not_found,
       {"embeddings.word_embeddings.weight"}},
      {"unknown_model_type", {.config_from = "\"model_type\": \"bert\"", .config_to = "\"model_type\": \"mpnet\""},
       StatusCode::unimplemented, {"mpnet"}},
      // A config that disagrees with the weights: the shape check names the table.
      {"wrong_vocab_size", {.config_from = "\"vocab_size\": 30522", .config_to = "\"vocab_size\": 30000"},
       StatusCode::invalid_argument, {"embeddings.word_embeddings.weight", "[30000, 64]", "[30522, 64]"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto dir = test::write_edited_checkpoint(std::string("bert_family_") + c.name, *src_dir, c.variant);
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    auto encoder = models::load_bert(*dir, Precision::f32);
    ASSERT_FALSE(encoder.has_value());
    const Status s = encoder.status();
    std::cout << "[ error    ] " << c.name << ": " << s.to_string() << "\n";
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    for (const std::string& m : c.mentions)
      EXPECT_NE(s.message().find(m), std::string::npos) << m << " in " << s.to_string();
  }
}

TEST(BertLoad, MissingDirectoryIsNotFound) {
  auto encoder = models::load_bert(test::scratch_dir("bert_family_empty") + "/nothing", Precision::f32);
  ASSERT_FALSE(encoder.has_value());
  EXPECT_EQ(encoder.status().code(), StatusCode::not_found) << encoder.status().to_string();
}

}  // namespace
}  // namespace prism

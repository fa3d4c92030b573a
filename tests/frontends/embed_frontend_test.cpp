// EmbedFrontend: limits read from config.json, knobs (known, unknown, wrong type),
// tokenisation limits and truncation, token-array checks, Matryoshka dimensions, and the
// embedding space id (stable; changed by a weight byte, pooling or normalisation; blind to
// files the model does not load). Model directories are small fakes: the frontend reads
// config, tokenizer and weight bytes, never tensors.
#include "frontends/embed_frontend.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engines/encode/fake_encoder.h"

namespace prism::frontends {
namespace {

using test::FakeModelDir;

std::shared_ptr<const EmbedFrontend> load_ok(const std::string& dir, const serving::Knobs& knobs = {}) {
  auto fe = EmbedFrontend::load(dir, knobs);
  EXPECT_TRUE(fe.has_value()) << fe.status().to_string();
  return fe.has_value() ? fe.value() : nullptr;
}

serving::Knobs knobs_of(std::initializer_list<std::pair<std::string, serving::KnobValue>> values) {
  serving::Knobs k;
  for (const auto& [name, v] : values) k.set(name, v, "prism.toml:7");
  return k;
}

TEST(EmbedFrontend, ReadsLimitsFromConfig) {
  auto fe = load_ok(FakeModelDir{}.write("fe_limits"));
  ASSERT_TRUE(fe);
  EXPECT_EQ(fe->family(), "bert");
  EXPECT_EQ(fe->dims(), 16);
  EXPECT_EQ(fe->max_tokens(), 64);
  EXPECT_EQ(fe->vocab_size(), 30522);
  EXPECT_EQ(fe->pad_id(), 0);  // [PAD]
  EXPECT_EQ(fe->pooling(), Pooling::mean);  // no modules.json: sentence-transformers' default
  EXPECT_FALSE(fe->normalize());
  EXPECT_TRUE(fe->matryoshka_dims().empty());
  EXPECT_EQ(fe->space_id().size(), 32u);
  EXPECT_EQ(fe->space_id().find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(EmbedFrontend, XlmRobertaPositionsStartAfterPadding) {
  FakeModelDir m;
  m.model_type = "xlm-roberta";
  m.max_positions = 514;
  m.pad_token_id = 1;
  auto fe = load_ok(m.write("fe_xlmr"));
  ASSERT_TRUE(fe);
  EXPECT_EQ(fe->max_tokens(), 512);  // 514 - (pad_token_id + 1)
}

TEST(EmbedFrontend, UnknownKnobIsNamedWithTheKnownOnes) {
  auto fe = EmbedFrontend::load(FakeModelDir{}.write("fe_knob"), knobs_of({{"colour", std::string("blue")}}));
  ASSERT_FALSE(fe.has_value());
  EXPECT_EQ(fe.status().code(), StatusCode::invalid_argument);
  const std::string m = fe.status().message();
  EXPECT_NE(m.find("prism.toml:7"), std::string::npos) << m;
  EXPECT_NE(m.find("'colour'"), std::string::npos) << m;
  for (const char* k : {"pooling", "normalize", "matryoshka_dims", "search_index", "packing", "bulk_chunk_tokens"})
    EXPECT_NE(m.find(k), std::string::npos) << k << " in " << m;
}

TEST(EmbedFrontend, KnobValuesAreChecked) {
  const std::string dir = FakeModelDir{}.write("fe_knob_values");
  EXPECT_FALSE(EmbedFrontend::load(dir, knobs_of({{"bulk_chunk_tokens", int64_t{0}}})).has_value());
  EXPECT_FALSE(EmbedFrontend::load(dir, knobs_of({{"packing", std::string("yes")}})).has_value());
  EXPECT_FALSE(EmbedFrontend::load(dir, knobs_of({{"pooling", std::string("max")}})).has_value());
  EXPECT_FALSE(EmbedFrontend::load(dir, knobs_of({{"matryoshka_dims", std::string("8,x")}})).has_value());
  EXPECT_FALSE(EmbedFrontend::load(dir, knobs_of({{"matryoshka_dims", std::string("32")}})).has_value());  // > dims

  auto fe = load_ok(dir, knobs_of({{"pooling", std::string("cls")},
                                   {"normalize", true},
                                   {"packing", false},
                                   {"bulk_chunk_tokens", int64_t{64}}}));
  ASSERT_TRUE(fe);
  EXPECT_EQ(fe->pooling(), Pooling::cls);
  EXPECT_TRUE(fe->normalize());
}

TEST(EmbedFrontend, MissingFilesAreClearErrors) {
  namespace fs = std::filesystem;
  const std::string dir = FakeModelDir{}.write("fe_missing");
  fs::remove(dir + "/model.safetensors");
  auto no_weights = EmbedFrontend::load(dir);
  ASSERT_FALSE(no_weights.has_value());
  EXPECT_NE(no_weights.status().message().find("model.safetensors"), std::string::npos);
  fs::remove(dir + "/tokenizer.json");
  EXPECT_FALSE(EmbedFrontend::load(dir).has_value());
  EXPECT_FALSE(EmbedFrontend::load(dir + "/nothing").has_value());
}

TEST(EmbedFrontend, TokenizeAddsSpecialTokensAndRefusesEmptyText) {
  auto fe = load_ok(FakeModelDir{}.write("fe_tok"));
  ASSERT_TRUE(fe);
  auto ids = fe->tokenize("hello world", false);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int32_t>{101, 7592, 2088, 102}));  // [CLS] hello world [SEP]
  auto empty = fe->tokenize("", false);
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(empty.status().message(), "is empty");
}

TEST(EmbedFrontend, TooLongTextGivesTheNumbersUnlessTruncated) {
  auto fe = load_ok(FakeModelDir{}.write("fe_long"));
  ASSERT_TRUE(fe);
  std::string text;
  for (int i = 0; i < 100; ++i) text += "hello ";  // 100 words + [CLS] + [SEP]
  auto refused = fe->tokenize(text, false);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(refused.status().message(),
            "has 102 tokens, more than this model's maximum of 64 (set truncate to cut it)");

  auto cut = fe->tokenize(text, true);
  ASSERT_TRUE(cut.has_value());
  ASSERT_EQ(cut->size(), 64u);
  EXPECT_EQ(cut->front(), 101);
  EXPECT_EQ(cut->back(), 102);  // the closing [SEP] survives
  for (size_t i = 1; i + 1 < cut->size(); ++i) EXPECT_EQ((*cut)[i], 7592) << i;

  std::string exact;
  for (int i = 0; i < 62; ++i) exact += "hello ";  // exactly 64 tokens: accepted as is
  auto fits = fe->tokenize(exact, false);
  ASSERT_TRUE(fits.has_value());
  EXPECT_EQ(fits->size(), 64u);
}

TEST(EmbedFrontend, CheckIds) {
  auto fe = load_ok(FakeModelDir{}.write("fe_ids"));
  ASSERT_TRUE(fe);
  const std::vector<int64_t> good = {101, 7592, 102};
  auto ok = fe->check_ids(good, false);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, (std::vector<int32_t>{101, 7592, 102}));

  auto empty = fe->check_ids({}, false);
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.status().message(), "is an empty token array");

  const std::vector<int64_t> big = {101, 30522, 102};
  auto out_of_vocab = fe->check_ids(big, false);
  ASSERT_FALSE(out_of_vocab.has_value());
  EXPECT_EQ(out_of_vocab.status().message(),
            "has token id 30522 at position 1, outside this model's vocabulary of 30522 ids");
  const std::vector<int64_t> negative = {-1};
  EXPECT_FALSE(fe->check_ids(negative, false).has_value());
  const std::vector<int64_t> huge = {int64_t{1} << 40};
  EXPECT_FALSE(fe->check_ids(huge, false).has_value());

  std::vector<int64_t> long_ids(70, 7592);
  long_ids.front() = 101;
  long_ids.back() = 102;
  auto too_long = fe->check_ids(long_ids, false);
  ASSERT_FALSE(too_long.has_value());
  EXPECT_EQ(too_long.status().message(), "has 70 tokens, more than this model's maximum of 64 (set truncate to cut it)");
  auto cut = fe->check_ids(long_ids, true);
  ASSERT_TRUE(cut.has_value());
  ASSERT_EQ(cut->size(), 64u);
  EXPECT_EQ(cut->back(), 102);  // the closing [SEP] kept
  std::vector<int64_t> plain(70, 7592);  // no closing token: simply the first 64
  auto cut_plain = fe->check_ids(plain, true);
  ASSERT_TRUE(cut_plain.has_value());
  EXPECT_EQ(*cut_plain, std::vector<int32_t>(64, 7592));

  const std::vector<int32_t> seq = {101, 30600};
  EXPECT_FALSE(fe->check_sequence(seq).ok());
  EXPECT_FALSE(fe->check_sequence({}).ok());
  EXPECT_TRUE(fe->check_sequence(std::vector<int32_t>{101, 102}).ok());
}

TEST(EmbedFrontend, DimensionsWithoutMatryoshkaList) {
  auto fe = load_ok(FakeModelDir{}.write("fe_dims"));
  ASSERT_TRUE(fe);
  EXPECT_TRUE(fe->check_dimensions(0).ok());
  EXPECT_TRUE(fe->check_dimensions(16).ok());
  EXPECT_TRUE(fe->check_dimensions(5).ok());  // no declared list: any size up to dims
  Status over = fe->check_dimensions(17);
  EXPECT_EQ(over.code(), StatusCode::invalid_argument);
  EXPECT_EQ(over.message(), "dimensions 17 is more than this model's 16 dimensions");
  Status negative = fe->check_dimensions(-4);
  EXPECT_EQ(negative.code(), StatusCode::invalid_argument);
  EXPECT_NE(negative.message().find("-4"), std::string::npos);
}

TEST(EmbedFrontend, MatryoshkaListFromConfigOrKnob) {
  FakeModelDir m;
  m.extra_config = ", \"matryoshka_dimensions\": [4, 8]";
  const std::string dir = m.write("fe_matryoshka");
  auto fe = load_ok(dir);
  ASSERT_TRUE(fe);
  EXPECT_EQ(fe->matryoshka_dims(), (std::vector<int64_t>{8, 4}));
  EXPECT_TRUE(fe->check_dimensions(8).ok());
  EXPECT_TRUE(fe->check_dimensions(16).ok());  // the full size is always fine
  Status off = fe->check_dimensions(6);
  EXPECT_EQ(off.code(), StatusCode::invalid_argument);
  EXPECT_EQ(off.message(), "dimensions 6 is not one of this model's Matryoshka sizes (8, 4)");

  auto knob = load_ok(dir, knobs_of({{"matryoshka_dims", std::string("16, 12,6")}}));
  ASSERT_TRUE(knob);
  EXPECT_EQ(knob->matryoshka_dims(), (std::vector<int64_t>{16, 12, 6}));
  EXPECT_TRUE(knob->check_dimensions(6).ok());
  EXPECT_FALSE(knob->check_dimensions(8).ok());
  auto single = load_ok(dir, knobs_of({{"matryoshka_dims", int64_t{8}}}));
  ASSERT_TRUE(single);
  EXPECT_EQ(single->matryoshka_dims(), (std::vector<int64_t>{8}));
}

TEST(EmbedFrontend, SpaceIdIsStableAndFollowsWeightsPoolingAndNormalisation) {
  namespace fs = std::filesystem;
  FakeModelDir m;
  const std::string dir = m.write("fe_space");
  auto a = load_ok(dir);
  auto b = load_ok(dir);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->space_id(), b->space_id());

  // Files the model does not load (a parity reference beside the weights) change nothing.
  std::ofstream(dir + "/reference.safetensors") << "expected outputs";
  EXPECT_EQ(load_ok(dir)->space_id(), a->space_id());

  // Knobs that change the vectors change the space; packing or chunking do not.
  EXPECT_NE(load_ok(dir, knobs_of({{"normalize", true}}))->space_id(), a->space_id());
  EXPECT_NE(load_ok(dir, knobs_of({{"pooling", std::string("cls")}}))->space_id(), a->space_id());
  EXPECT_EQ(load_ok(dir, knobs_of({{"packing", false}, {"bulk_chunk_tokens", int64_t{32}}}))->space_id(),
            a->space_id());

  // One weight byte.
  FakeModelDir changed = m;
  changed.weight_bytes[changed.weight_bytes.size() - 1] ^= 1;
  EXPECT_NE(load_ok(changed.write("fe_space_byte"))->space_id(), a->space_id());
  // Same weights, another directory: the same space.
  EXPECT_EQ(load_ok(m.write("fe_space_copy"))->space_id(), a->space_id());
  // The config is part of it.
  FakeModelDir other_config = m;
  other_config.max_positions = 128;
  EXPECT_NE(load_ok(other_config.write("fe_space_config"))->space_id(), a->space_id());
}

TEST(EmbedFrontend, SpaceIdOfShardedWeights) {
  namespace fs = std::filesystem;
  const std::string dir = FakeModelDir{}.write("fe_shards");
  fs::remove(dir + "/model.safetensors");
  std::ofstream(dir + "/model-00001-of-00002.safetensors") << "shard one";
  std::ofstream(dir + "/model-00002-of-00002.safetensors") << "shard two";
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}})";
  auto a = load_ok(dir);
  ASSERT_TRUE(a);
  std::ofstream(dir + "/model-00002-of-00002.safetensors") << "shard 2";
  auto b = load_ok(dir);
  ASSERT_TRUE(b);
  EXPECT_NE(a->space_id(), b->space_id());
  fs::remove(dir + "/model-00001-of-00002.safetensors");
  EXPECT_FALSE(EmbedFrontend::load(dir).has_value());  // a listed shard is missing
}

}  // namespace
}  // namespace prism::frontends

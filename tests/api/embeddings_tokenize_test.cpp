// tests/api/embeddings_tokenize_test.cpp: POST /v1/embeddings' tokenization step against a
// real EmbedFrontend (bert-base-uncased's tokenizer, a 64-token model): texts and token
// arrays become checked ids, and the frontend's errors come back naming the input element.
// The model directory is a stub: the frontend reads config, tokenizer and weight bytes only.
#include "api/routes/embeddings.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util/paths.h"

namespace prism::api {
namespace {

using frontends::EmbedFrontend;

constexpr int32_t kCls = 101, kSep = 102;  // bert-base-uncased

std::shared_ptr<const EmbedFrontend> frontend() {
  static std::shared_ptr<const EmbedFrontend> fe = [] {
    // Named after the test that builds it: ctest runs each test in its own process, in parallel.
    const std::string dir = test::scratch_dir(std::string("embeddings_tokenize_") +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::ofstream(dir + "/config.json") << R"({"architectures": ["BertModel"], "model_type": "bert",
        "hidden_size": 16, "vocab_size": 30522, "max_position_embeddings": 64, "pad_token_id": 0})";
    std::filesystem::copy_file(test::testdata_dir() + "/tokenizers/bert-uncased/tokenizer.json",
                               dir + "/tokenizer.json");
    std::ofstream(dir + "/model.safetensors", std::ios::binary) << "stub weights";
    Result<std::shared_ptr<const EmbedFrontend>> loaded = EmbedFrontend::load(dir);
    EXPECT_TRUE(loaded.has_value()) << loaded.status().message();
    return loaded.has_value() ? loaded.value() : nullptr;
  }();
  return fe;
}

EmbeddingInputs inputs_of(std::string_view json) {
  Result<EmbeddingInputs> r = parse_embedding_input(nlohmann::json::parse(json));
  EXPECT_TRUE(r.has_value()) << json;
  return r.has_value() ? r.value() : EmbeddingInputs{};
}

std::string error_of(std::string_view json, bool truncate = false) {
  Result<std::vector<std::vector<int32_t>>> r = tokenize_inputs(inputs_of(json), *frontend(), truncate);
  EXPECT_FALSE(r.has_value()) << json;
  return r.has_value() ? "" : r.status().message();
}

std::string words(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "hello ";
  return s;
}

TEST(EmbeddingsTokenize, TextsGetTheirSpecialTokens) {
  ASSERT_TRUE(frontend());
  Result<std::vector<std::vector<int32_t>>> r = tokenize_inputs(inputs_of(R"(["hello world", "hello"])"), *frontend(), false);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0], (std::vector<int32_t>{kCls, 7592, 2088, kSep}));
  EXPECT_EQ((*r)[1], (std::vector<int32_t>{kCls, 7592, kSep}));
}

TEST(EmbeddingsTokenize, TokenArraysAreTakenAsGiven) {
  ASSERT_TRUE(frontend());
  Result<std::vector<std::vector<int32_t>>> r = tokenize_inputs(inputs_of("[[7592, 2088], [5]]"), *frontend(), false);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ((*r)[0], (std::vector<int32_t>{7592, 2088}));
  EXPECT_EQ((*r)[1], (std::vector<int32_t>{5}));
}

TEST(EmbeddingsTokenize, TooLongGivesTheNumbersAndNamesTheElement) {
  ASSERT_TRUE(frontend());
  const nlohmann::json texts = {"hello", words(70)};
  const std::string m = error_of(texts.dump());
  EXPECT_EQ(m.rfind("input[1] has 72 tokens", 0), 0u) << m;
  EXPECT_NE(m.find("64"), std::string::npos) << m;
  EXPECT_NE(m.find("truncate"), std::string::npos) << m;
  const std::string scalar = error_of(nlohmann::json(words(70)).dump());
  EXPECT_EQ(scalar.rfind("input has 72 tokens", 0), 0u) << scalar;
}

TEST(EmbeddingsTokenize, TruncateCutsToTheMaximumKeepingSep) {
  ASSERT_TRUE(frontend());
  const nlohmann::json texts = {words(70), "hello"};
  Result<std::vector<std::vector<int32_t>>> r = tokenize_inputs(inputs_of(texts.dump()), *frontend(), true);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  ASSERT_EQ((*r)[0].size(), 64u);
  EXPECT_EQ((*r)[0].front(), kCls);
  EXPECT_EQ((*r)[0].back(), kSep);
  EXPECT_EQ((*r)[1].size(), 3u);
}

TEST(EmbeddingsTokenize, IdsOutsideTheVocabularyNameTheElement) {
  ASSERT_TRUE(frontend());
  std::string m = error_of("[[101, 102], [101, 30522, 102]]");
  EXPECT_EQ(m.rfind("input[1] has token id 30522 at position 1", 0), 0u) << m;
  m = error_of("[101, -1]");
  EXPECT_EQ(m.rfind("input has token id -1 at position 1", 0), 0u) << m;
  std::vector<int> long_ids(65, 7592);
  m = error_of(nlohmann::json(long_ids).dump());
  EXPECT_EQ(m.rfind("input has 65 tokens", 0), 0u) << m;
}

}  // namespace
}  // namespace prism::api

// tests/api/embeddings_format_test.cpp: the pure steps of POST /v1/embeddings: reading the
// four forms of `input` and their errors, float printing, base64 vectors, the response body.
#include "api/routes/embeddings.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/precompiled.h"

namespace prism::api {
namespace {

using nlohmann::json;

Result<EmbeddingInputs> parse(std::string_view text) { return parse_embedding_input(json::parse(text)); }

std::string error_of(std::string_view text) {
  Result<EmbeddingInputs> r = parse(text);
  EXPECT_FALSE(r.has_value()) << text;
  if (r.has_value()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  return r.status().message();
}

TEST(EmbeddingsInput, OneString) {
  Result<EmbeddingInputs> r = parse(R"("hello world")");
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->tokens);
  EXPECT_TRUE(r->scalar);
  EXPECT_EQ(r->texts, std::vector<std::string>{"hello world"});
  EXPECT_EQ(r->size(), 1u);
  EXPECT_EQ(r->name(0), "input");
}

TEST(EmbeddingsInput, ArrayOfStrings) {
  Result<EmbeddingInputs> r = parse(R"(["a", "b c", "d"])");
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->tokens);
  EXPECT_FALSE(r->scalar);
  EXPECT_EQ(r->texts, (std::vector<std::string>{"a", "b c", "d"}));
  EXPECT_EQ(r->name(2), "input[2]");
}

TEST(EmbeddingsInput, OneTokenArray) {
  Result<EmbeddingInputs> r = parse(R"([101, 7592, 102])");
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->tokens);
  EXPECT_TRUE(r->scalar);
  ASSERT_EQ(r->token_ids.size(), 1u);
  EXPECT_EQ(r->token_ids[0], (std::vector<int64_t>{101, 7592, 102}));
  EXPECT_EQ(r->name(0), "input");
}

TEST(EmbeddingsInput, ArrayOfTokenArrays) {
  Result<EmbeddingInputs> r = parse(R"([[1, 2], [3], [4, 5, 6]])");
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->tokens);
  EXPECT_FALSE(r->scalar);
  EXPECT_EQ(r->token_ids, (std::vector<std::vector<int64_t>>{{1, 2}, {3}, {4, 5, 6}}));
  EXPECT_EQ(r->size(), 3u);
}

TEST(EmbeddingsInput, EmptyThingsNameTheElement) {
  EXPECT_EQ(error_of(R"("")"), "input is an empty string.");
  EXPECT_EQ(error_of(R"([])"), "input is an empty array.");
  EXPECT_EQ(error_of(R"(["a", "b", "c", ""])"), "input[3] is an empty string.");
  EXPECT_EQ(error_of(R"([[1], []])"), "input[1] is an empty token array.");
  EXPECT_EQ(error_of(R"([[]])"), "input[0] is an empty token array.");
}

TEST(EmbeddingsInput, MixedFormsAreRefused) {
  std::string m = error_of(R"(["a", 1])");
  EXPECT_NE(m.find("input[1] is an integer but input[0] is a string"), std::string::npos) << m;
  m = error_of(R"([[1, 2], "a"])");
  EXPECT_NE(m.find("input[1] is a string but input[0] is an array"), std::string::npos) << m;
  m = error_of(R"([1, "a"])");
  EXPECT_NE(m.find("input[1] is a string, not an integer token id"), std::string::npos) << m;
  m = error_of(R"([1, [2]])");
  EXPECT_NE(m.find("input[1] is an array, not an integer token id"), std::string::npos) << m;
}

TEST(EmbeddingsInput, TokenIdsMustBeIntegers) {
  EXPECT_EQ(error_of(R"([1, 2.5])"), "input[1] is 2.5, not an integer token id.");
  EXPECT_EQ(error_of(R"([[1], [2, 3, 1.0]])"), "input[1][2] is 1.0, not an integer token id.");
  EXPECT_EQ(error_of(R"([[1, [2]]])"), "input[0][1] is an array, not an integer token id.");
  std::string m = error_of(R"([18446744073709551615])");
  EXPECT_NE(m.find("input[0] is not a token id"), std::string::npos) << m;
  // Negative and huge ids parse: the frontend judges them against the vocabulary.
  Result<EmbeddingInputs> r = parse(R"([-1, 9223372036854775807])");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->token_ids[0][0], -1);
}

TEST(EmbeddingsInput, OtherTypesAreRefused) {
  for (const char* body : {"1", "true", "null", R"({"text": "a"})", "[true]", "[null]", R"([{"a": 1}])"}) {
    std::string m = error_of(body);
    EXPECT_NE(m.find("input must be a string, an array of strings, an array of token ids"), std::string::npos)
        << body << ": " << m;
  }
}

TEST(EmbeddingsInput, AtMost2048Inputs) {
  json many = json::array();
  for (int i = 0; i < 2048; ++i) many.push_back("x");
  EXPECT_TRUE(parse_embedding_input(many).has_value());
  many.push_back("x");
  Result<EmbeddingInputs> r = parse_embedding_input(many);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message(), "input has 2049 elements; at most 2048 inputs are allowed per request.");
  json nested = json::array();
  for (int i = 0; i < 2049; ++i) nested.push_back({1});
  EXPECT_FALSE(parse_embedding_input(nested).has_value());
  // One token array is one input, however long: its length is checked against the model.
  json ids = json::array();
  for (int i = 0; i < 5000; ++i) ids.push_back(1);
  EXPECT_TRUE(parse_embedding_input(ids).has_value());
}

std::string float_text(float v) {
  std::string s;
  append_json_float(s, v);
  return s;
}

TEST(EmbeddingsFloat, ShortestTextThatReadsBack) {
  EXPECT_EQ(float_text(0.1f), "0.1");
  EXPECT_EQ(float_text(1.0f), "1");
  EXPECT_EQ(float_text(-0.5f), "-0.5");
  EXPECT_EQ(float_text(0.0f), "0");
  EXPECT_EQ(float_text(1e-5f), "1e-05");
  EXPECT_EQ(float_text(std::numeric_limits<float>::quiet_NaN()), "null");
  EXPECT_EQ(float_text(std::numeric_limits<float>::infinity()), "null");
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < 10000; ++i) {
    const float v = u(rng) * std::pow(10.0f, static_cast<float>(i % 9) - 4.0f);
    const std::string s = float_text(v);
    EXPECT_EQ(std::strtof(s.c_str(), nullptr), v) << s;
    EXPECT_LE(s.size(), 16u) << s;  // never a double's 17 digits
    // nlohmann reads it as a valid JSON number.
    EXPECT_EQ(static_cast<float>(json::parse(s).get<double>()), v) << s;
  }
}

TEST(EmbeddingsBase64, LittleEndianFloat32) {
  EXPECT_EQ(base64_float32(std::vector<float>{}), "");
  EXPECT_EQ(base64_float32(std::vector<float>{1.0f}), "AACAPw==");
  EXPECT_EQ(base64_float32(std::vector<float>{1.0f, -2.0f}), "AACAPwAAAMA=");
  EXPECT_EQ(base64_float32(std::vector<float>{0.5f, 0.25f, -1.5f}), "AAAAPwAAgD4AAMC/");
}

TEST(EmbeddingsBase64, DecodesToTheSameBytes) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (size_t n : {1u, 2u, 3u, 5u, 128u, 384u, 1001u}) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    Result<std::string> bytes = text::base64_decode(base64_float32(v));
    ASSERT_TRUE(bytes.has_value());
    ASSERT_EQ(bytes->size(), n * 4);
    std::vector<float> back(n);
    std::memcpy(back.data(), bytes->data(), bytes->size());  // this machine is little-endian
    EXPECT_EQ(back, v);
  }
}

EmbeddingsReply reply_of(const std::vector<float>& vectors, int64_t dims, bool base64) {
  EmbeddingsReply r;
  r.model = "demo \"embed\"";
  r.dims = dims;
  r.vectors = vectors;
  r.base64 = base64;
  r.prompt_tokens = 17;
  r.space_id = "0123abcd";
  r.normalized = true;
  return r;
}

TEST(EmbeddingsResponse, OpenAIShapeWithThePrismField) {
  const std::vector<float> v = {0.1f, -0.2f, 0.3f, 1.0f, 0.0f, -1e-5f};
  const std::string body = embeddings_json(reply_of(v, 3, false));
  const json j = json::parse(body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "demo \"embed\"");
  ASSERT_EQ(j["data"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j["data"][i]["object"], "embedding");
    EXPECT_EQ(j["data"][i]["index"], i);
    ASSERT_EQ(j["data"][i]["embedding"].size(), 3u);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(static_cast<float>(j["data"][i]["embedding"][k].get<double>()), v[3 * i + k]);
  }
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 17}, {"total_tokens", 17}}));
  EXPECT_EQ(j["prism"], json({{"embedding_space", "0123abcd"}, {"dims", 3}, {"normalized", true}}));
  EXPECT_NE(body.find("[0.1,-0.2,0.3]"), std::string::npos) << body;  // floats, not doubles
}

TEST(EmbeddingsResponse, Base64Vectors) {
  const std::vector<float> v = {1.0f, -2.0f, 0.5f, 0.25f};
  const json j = json::parse(embeddings_json(reply_of(v, 2, true)));
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["embedding"], "AACAPwAAAMA=");
  EXPECT_EQ(j["data"][1]["embedding"], base64_float32(std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(j["prism"]["dims"], 2);
}

TEST(EmbeddingsResponse, InvalidUtf8InTheModelNameStillMakesJson) {
  EmbeddingsReply r = reply_of({1.0f}, 1, false);
  r.model = "bad\xff";
  EXPECT_FALSE(json::parse(embeddings_json(r), nullptr, false).is_discarded());
}

}  // namespace
}  // namespace prism::api

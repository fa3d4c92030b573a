// tests/api/chat_response_test.cpp: the bodies of /v1/chat/completions and /v1/completions:
// whole responses, stream chunks, both logprobs shapes, usage.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/routes/generate_response.h"

namespace prism::api {
namespace {

using nlohmann::json;

// Token t's text is "<t>", except 7 → "é" (two bytes) and 8 → the same text as 9.
std::string token_text(int32_t t) {
  if (t == 7) return "\xc3\xa9";
  if (t == 8 || t == 9) return "x";
  return "<" + std::to_string(t) + ">";
}

ReplyHeader header(GenerateApi api, bool include_usage = false) {
  ReplyHeader h;
  h.api = api;
  h.id = api == GenerateApi::chat ? "chatcmpl-r1" : "cmpl-r1";
  h.model = "demo-chat";
  h.created = 1764500000;
  h.system_fingerprint = "prism-f32";
  h.include_usage = include_usage;
  return h;
}

std::vector<frontends::TokenLogprobs> two_logprobs() {
  return {{{7, -0.5f}, {{7, -0.5f}, {3, -1.25f}}}, {{8, -0.25f}, {{8, -0.25f}, {9, -2.0f}}}};
}

TEST(ChatResponse, WholeResponse) {
  const std::vector<frontends::TokenLogprobs> lps = two_logprobs();
  std::vector<FinalChoice> choices(2);
  choices[0].index = 0;
  choices[0].text = "Hello";
  choices[0].finish = frontends::FinishReason::length;
  choices[1].index = 1;
  choices[1].text = "Bye";
  choices[1].finish = frontends::FinishReason::stop;
  choices[1].logprobs = lps;
  choices[1].has_logprobs = true;
  Usage usage{10, 6, 4};
  const json j = json::parse(response_json(header(GenerateApi::chat), choices, usage, token_text));
  EXPECT_EQ(j["id"], "chatcmpl-r1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1764500000);
  EXPECT_EQ(j["model"], "demo-chat");
  EXPECT_EQ(j["system_fingerprint"], "prism-f32");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "Hello"}}));
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  const json& content = j["choices"][1]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "\xc3\xa9");
  EXPECT_DOUBLE_EQ(content[0]["logprob"].get<double>(), -0.5);
  EXPECT_EQ(content[0]["bytes"], json({195, 169}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1], json({{"token", "<3>"}, {"logprob", -1.25}, {"bytes", {60, 51, 62}}}));
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 10},
                              {"completion_tokens", 6},
                              {"total_tokens", 16},
                              {"prompt_tokens_details", {{"cached_tokens", 4}}}}));
  // keys in OpenAI's order
  EXPECT_EQ(
      response_json(header(GenerateApi::chat), {}, usage, token_text).rfind(R"({"id":"chatcmpl-r1","object":)", 0), 0u);
}

TEST(ChatResponse, Chunks) {
  int64_t offset = 0;
  StreamPiece role;
  role.index = 1;
  role.role = true;
  json j = json::parse(chunk_json(header(GenerateApi::chat), role, token_text, offset));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["id"], "chatcmpl-r1");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0], json({{"index", 1},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}));
  EXPECT_FALSE(j.contains("usage"));

  const std::vector<frontends::TokenLogprobs> lps = two_logprobs();
  StreamPiece text;
  text.text = "\xc3\xa9x";
  text.logprobs = lps;
  j = json::parse(chunk_json(header(GenerateApi::chat, /*include_usage=*/true), text, token_text, offset));
  EXPECT_EQ(j["choices"][0]["delta"], json({{"content", "\xc3\xa9x"}}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_TRUE(j.contains("usage") && j["usage"].is_null());

  StreamPiece finish;
  finish.finish = frontends::FinishReason::stop;
  j = json::parse(chunk_json(header(GenerateApi::chat), finish, token_text, offset));
  EXPECT_EQ(j["choices"][0]["delta"], json::object());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");

  j = json::parse(usage_chunk_json(header(GenerateApi::chat, true), Usage{3, 2, 0}));
  EXPECT_EQ(j["choices"], json::array());
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(CompletionsResponse, LegacyLogprobsAndOffsets) {
  const std::vector<frontends::TokenLogprobs> lps = two_logprobs();
  int64_t offset = 5;  // after an echoed prompt of five bytes
  const json j = legacy_logprobs_json(lps, token_text, offset);
  EXPECT_EQ(j["tokens"], json({"\xc3\xa9", "x"}));
  EXPECT_EQ(j["token_logprobs"], json({-0.5, -0.25}));
  // tokens 8 and 9 share the text "x": the likelier one is kept
  EXPECT_EQ(j["top_logprobs"], json::parse(R"([{"é": -0.5, "<3>": -1.25}, {"x": -0.25}])"));
  EXPECT_EQ(j["text_offset"], json({5, 7}));
  EXPECT_EQ(offset, 8);
}

TEST(CompletionsResponse, WholeResponseAndChunks) {
  const std::vector<frontends::TokenLogprobs> lps = two_logprobs();
  std::vector<FinalChoice> choices(1);
  choices[0].index = 3;
  choices[0].text = "Once\xc3\xa9x";
  choices[0].logprobs = lps;
  choices[0].has_logprobs = true;
  choices[0].text_offset = 4;
  choices[0].finish = frontends::FinishReason::length;
  json j = json::parse(response_json(header(GenerateApi::completions), choices, Usage{4, 2, 0}, token_text));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"], "cmpl-r1");
  EXPECT_EQ(j["choices"][0]["index"], 3);
  EXPECT_EQ(j["choices"][0]["text"], "Once\xc3\xa9x");
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json({4, 6}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  int64_t offset = 0;
  StreamPiece piece;
  piece.index = 2;
  piece.text = "abc";
  j = json::parse(chunk_json(header(GenerateApi::completions), piece, token_text, offset));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0], json({{"index", 2}, {"text", "abc"}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
  StreamPiece finish;
  finish.index = 2;
  finish.finish = frontends::FinishReason::stop;
  j = json::parse(chunk_json(header(GenerateApi::completions), finish, token_text, offset));
  EXPECT_EQ(j["choices"][0]["text"], "");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(ChatResponse, LogprobsPrintAsFloats) {
  const std::vector<frontends::TokenLogprobs> lps = {{{3, -0.1f}, {}}};
  const std::string chat = chat_logprobs_json(lps, token_text).dump();
  EXPECT_NE(chat.find(R"("logprob":-0.1,)"), std::string::npos) << chat;
  int64_t offset = 0;
  const std::string legacy = legacy_logprobs_json(lps, token_text, offset).dump();
  EXPECT_NE(legacy.find(R"("token_logprobs":[-0.1])"), std::string::npos) << legacy;
}

TEST(ChatResponse, InvalidUtf8IsReplaced) {
  std::vector<FinalChoice> choices(1);
  choices[0].text = "a\xc3";  // a cut character never reaches the client as raw bytes
  const json j = json::parse(response_json(header(GenerateApi::chat), choices, Usage{}, token_text));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "a\xef\xbf\xbd");
}

}  // namespace
}  // namespace prism::api

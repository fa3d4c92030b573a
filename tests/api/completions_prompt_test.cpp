// tests/api/completions_prompt_test.cpp: the four forms of /v1/completions' `prompt` and the
// errors naming their element.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/routes/completions.h"

namespace prism::api {
namespace {

using nlohmann::json;

std::string error_of(std::string_view text) {
  Result<CompletionPrompts> r = parse_completion_prompt(json::parse(text));
  EXPECT_FALSE(r.has_value()) << text;
  if (r.has_value()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  return r.status().message();
}

TEST(CompletionsPrompt, FourForms) {
  Result<CompletionPrompts> r = parse_completion_prompt(json::parse(R"("Once upon")"));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->scalar);
  EXPECT_FALSE(r->tokens);
  EXPECT_EQ(r->texts, std::vector<std::string>{"Once upon"});
  EXPECT_EQ(r->name(0), "prompt");

  r = parse_completion_prompt(json::parse(R"(["a", "b"])"));
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->scalar);
  EXPECT_EQ(r->size(), 2u);
  EXPECT_EQ(r->name(1), "prompt[1]");

  r = parse_completion_prompt(json::parse(R"([1, 2, 3])"));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->tokens);
  EXPECT_TRUE(r->scalar);
  EXPECT_EQ(r->token_ids, (std::vector<std::vector<int64_t>>{{1, 2, 3}}));

  r = parse_completion_prompt(json::parse(R"([[1], [2, 3]])"));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->tokens);
  EXPECT_FALSE(r->scalar);
  EXPECT_EQ(r->token_ids, (std::vector<std::vector<int64_t>>{{1}, {2, 3}}));
}

TEST(CompletionsPrompt, ErrorsNameTheElement) {
  EXPECT_EQ(error_of(R"("")"), "prompt is an empty string.");
  EXPECT_EQ(error_of(R"([])"), "prompt is an empty array.");
  EXPECT_EQ(error_of(R"(["a", ""])"), "prompt[1] is an empty string.");
  EXPECT_EQ(error_of(R"([[1], []])"), "prompt[1] is an empty token array.");
  EXPECT_EQ(error_of(R"([1, 2.5])"), "prompt[1] is 2.5, not an integer token id.");
  EXPECT_EQ(error_of(R"([[1], [2, "x"]])"), "prompt[1][1] is a string, not an integer token id.");
  EXPECT_NE(error_of(R"(["a", [1]])").find("prompt[1] is an array but prompt[0] is a string"), std::string::npos);
  EXPECT_NE(error_of(R"(7)").find("prompt must be a string, an array of strings"), std::string::npos);
  EXPECT_NE(error_of(R"([{"a": 1}])").find("prompt[0] is an object"), std::string::npos);
  json many = json::array();
  for (size_t i = 0; i <= kMaxPrompts; ++i) many.push_back("p");
  EXPECT_EQ(error_of(many.dump()), "prompt has 65 elements; at most 64 prompts are allowed per request.");
}

}  // namespace
}  // namespace prism::api

// tests/api/chat_request_test.cpp: reading the generate routes' requests: the shared sampling
// fields (every error names its parameter, in OpenAI's error JSON), SamplingParams over the
// model's defaults, and the chat conversation (roles, content parts, tools, response_format).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/routes/chat_completions.h"
#include "api/routes/generate_request.h"

namespace prism::api {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

struct Read {
  GenerateFields fields;
  std::optional<ApiError> error;
};

Read read(std::string_view body, GenerateApi api = GenerateApi::chat) {
  JsonFields f(body);
  Read r;
  r.fields = read_generate_fields(f, api);
  if (!f.ok()) r.error = f.error();
  return r;
}

// The error of a body: its param, and its message contains `part`.
void expect_error(std::string_view body, std::string_view param, std::string_view part,
                  GenerateApi api = GenerateApi::chat) {
  Read r = read(body, api);
  ASSERT_TRUE(r.error.has_value()) << body;
  EXPECT_EQ(r.error->status, 400) << body;
  EXPECT_EQ(r.error->param, param) << body;
  EXPECT_NE(r.error->message.find(part), std::string::npos) << body << " → " << r.error->message;
  const json j = json::parse(error_json(*r.error));
  EXPECT_EQ(j["error"]["param"], std::string(param));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
}

TEST(GenerateFields, DefaultsLeaveSamplingUnset) {
  Read r = read(R"({"model": "m", "messages": []})");
  ASSERT_FALSE(r.error);
  EXPECT_FALSE(r.fields.temperature);
  EXPECT_FALSE(r.fields.top_p);
  EXPECT_FALSE(r.fields.top_k);
  EXPECT_FALSE(r.fields.seed);
  EXPECT_FALSE(r.fields.max_tokens);  // chat: the room left in the context
  EXPECT_EQ(r.fields.n, 1);
  EXPECT_FALSE(r.fields.stream);
  EXPECT_FALSE(r.fields.logprobs);
  EXPECT_TRUE(r.fields.stop.empty());
  EXPECT_EQ(r.fields.lane, serving::Lane::online);
  // completions: OpenAI's default of 16
  Read c = read(R"({"model": "m", "prompt": "x"})", GenerateApi::completions);
  ASSERT_FALSE(c.error);
  EXPECT_EQ(c.fields.max_tokens, kDefaultCompletionsMaxTokens);
}

TEST(GenerateFields, ReadsEveryField) {
  Read r = read(R"({"temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
                    "frequency_penalty": -1.5, "presence_penalty": 2, "seed": 42, "max_tokens": 7,
                    "min_tokens": 2, "stop": ["a", "bc"], "stop_token_ids": [5, 6], "ignore_eos": true,
                    "logprobs": true, "top_logprobs": 3, "n": 2, "stream": true,
                    "stream_options": {"include_usage": true}, "user": "u", "priority": "bulk",
                    "unknown_field": {"ignored": 1}})");
  ASSERT_FALSE(r.error) << r.error->message;
  const GenerateFields& g = r.fields;
  EXPECT_DOUBLE_EQ(*g.temperature, 0.5);
  EXPECT_DOUBLE_EQ(*g.top_p, 0.9);
  EXPECT_EQ(*g.top_k, 40);
  EXPECT_DOUBLE_EQ(*g.min_p, 0.05);
  EXPECT_DOUBLE_EQ(*g.repetition_penalty, 1.1);
  EXPECT_DOUBLE_EQ(*g.frequency_penalty, -1.5);
  EXPECT_DOUBLE_EQ(*g.presence_penalty, 2.0);
  EXPECT_EQ(*g.seed, 42u);
  EXPECT_EQ(*g.max_tokens, 7);
  EXPECT_EQ(g.min_tokens, 2);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(g.stop_token_ids, (std::vector<int64_t>{5, 6}));
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_TRUE(g.logprobs);
  EXPECT_EQ(g.top_logprobs, 3);
  EXPECT_EQ(g.n, 2);
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.include_usage);
  EXPECT_EQ(g.lane, serving::Lane::bulk);
}

TEST(GenerateFields, SmallForms) {
  EXPECT_EQ(read(R"({"stop": "end"})").fields.stop, std::vector<std::string>{"end"});
  EXPECT_TRUE(read(R"({"stop": []})").fields.stop.empty());
  EXPECT_TRUE(read(R"({"stop": null})").fields.stop.empty());
  EXPECT_EQ(*read(R"({"top_k": -1})").fields.top_k, 0);  // vLLM's "off"
  EXPECT_EQ(*read(R"({"seed": -1})").fields.seed, UINT64_MAX);
  EXPECT_EQ(*read(R"({"seed": 18446744073709551615})").fields.seed, UINT64_MAX);
  // max_completion_tokens wins over the older name
  EXPECT_EQ(*read(R"({"max_tokens": 5, "max_completion_tokens": 9})").fields.max_tokens, 9);
  // completions: logprobs is the legacy integer
  Read c = read(R"({"logprobs": 0})", GenerateApi::completions);
  EXPECT_TRUE(c.fields.logprobs);
  EXPECT_EQ(c.fields.top_logprobs, 0);
  c = read(R"({"logprobs": 5})", GenerateApi::completions);
  EXPECT_EQ(c.fields.top_logprobs, 5);
  EXPECT_TRUE(read(R"({"logit_bias": {}})").error == std::nullopt);
}

TEST(GenerateFields, EveryErrorNamesItsParameter) {
  expect_error(R"({"temperature": 2.5})", "temperature", "between 0.0 and 2.0");
  expect_error(R"({"temperature": "hot"})", "temperature", "expected a number");
  expect_error(R"({"top_p": 0})", "top_p", "greater than 0");
  expect_error(R"({"top_p": 1.5})", "top_p", "between 0.0 and 1.0");
  expect_error(R"({"top_k": -2})", "top_k", "between -1");
  expect_error(R"({"min_p": 2})", "min_p", "between 0.0 and 1.0");
  expect_error(R"({"repetition_penalty": 0})", "repetition_penalty", "greater than 0");
  expect_error(R"({"frequency_penalty": -3})", "frequency_penalty", "between -2.0 and 2.0");
  expect_error(R"({"presence_penalty": 2.1})", "presence_penalty", "between -2.0 and 2.0");
  expect_error(R"({"seed": 1.5})", "seed", "expected an integer");
  expect_error(R"({"max_tokens": 0})", "max_tokens", "between 1");
  expect_error(R"({"max_completion_tokens": -4})", "max_completion_tokens", "between 1");
  expect_error(R"({"min_tokens": -1})", "min_tokens", "between 0");
  expect_error(R"({"stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4");
  expect_error(R"({"stop": ["a", ""]})", "stop[1]", "must not be empty");
  expect_error(R"({"stop": ""})", "stop", "must not be empty");
  expect_error(R"({"stop": ["a", 3]})", "stop[1]", "expected a string");
  expect_error(R"({"stop": 7})", "stop", "a string or an array of strings");
  expect_error(R"({"stop_token_ids": 3})", "stop_token_ids", "expected an array");
  expect_error(R"({"stop_token_ids": [1, "x"]})", "stop_token_ids[1]", "integer token id");
  expect_error(R"({"ignore_eos": 1})", "ignore_eos", "expected a boolean");
  expect_error(R"({"logprobs": 1})", "logprobs", "expected a boolean");
  expect_error(R"({"top_logprobs": 21, "logprobs": true})", "top_logprobs", "at most 20");
  expect_error(R"({"top_logprobs": 2})", "top_logprobs", "requires logprobs");
  expect_error(R"({"logprobs": 6})", "logprobs", "at most 5", GenerateApi::completions);
  expect_error(R"({"logprobs": true})", "logprobs", "expected an integer", GenerateApi::completions);
  expect_error(R"({"n": 0})", "n", "between 1 and 16");
  expect_error(R"({"n": 17})", "n", "at most 16");
  expect_error(R"({"stream": "yes"})", "stream", "expected a boolean");
  expect_error(R"({"stream_options": {"include_usage": true}})", "stream_options", "only allowed when stream");
  expect_error(R"({"stream": true, "stream_options": 1})", "stream_options", "expected an object");
  expect_error(R"({"stream": true, "stream_options": {"include_usage": "y"}})", "stream_options.include_usage",
               "expected a boolean");
  expect_error(R"({"user": 5})", "user", "expected a string");
  expect_error(R"({"priority": "urgent"})", "priority", "is not one of");
  expect_error(R"({"logit_bias": {"50256": -100}})", "logit_bias", "not supported");
}

TEST(GenerateFields, SamplingParamsOverTheModelDefaults) {
  frontends::SamplingParams defaults;
  defaults.temperature = 0.6f;
  defaults.top_p = 0.9f;
  defaults.top_k = 20;
  Read r = read(R"({"temperature": 0, "stop": ["x"], "seed": 3, "n": 2, "logprobs": true, "top_logprobs": 2,
                    "min_tokens": 1})");
  ASSERT_FALSE(r.error);
  Result<frontends::SamplingParams> p = to_sampling_params(r.fields, defaults, 12, {7});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->temperature, 0.0f);  // set by the request
  EXPECT_FLOAT_EQ(p->top_p, 0.9f);  // the model's
  EXPECT_EQ(p->top_k, 20);
  EXPECT_EQ(p->max_tokens, 12);
  EXPECT_EQ(p->min_tokens, 1);
  EXPECT_EQ(p->stop, std::vector<std::string>{"x"});
  EXPECT_EQ(p->stop_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(*p->seed, 3u);
  EXPECT_EQ(p->n, 2);
  EXPECT_TRUE(p->logprobs);
  EXPECT_EQ(p->top_logprobs, 2);

  Read m = read(R"({"min_tokens": 20})");
  Result<frontends::SamplingParams> bad = to_sampling_params(m.fields, defaults, 10, {});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("min_tokens (20) is more than max_tokens (10)"), std::string::npos);
}

// ---- the conversation ----

Result<text::ChatRequest> chat_of(std::string_view body, ApiError& error) {
  return read_chat_request(ojson::parse(body), error);
}

void expect_chat_error(std::string_view body, std::string_view param, std::string_view part) {
  ApiError error;
  Result<text::ChatRequest> r = chat_of(body, error);
  ASSERT_FALSE(r.has_value()) << body;
  EXPECT_EQ(error.status, 400) << body;
  EXPECT_EQ(error.param, param) << body;
  EXPECT_NE(error.message.find(part), std::string::npos) << body << " → " << error.message;
}

TEST(ChatRequest, MessagesToTheTemplate) {
  ApiError error;
  Result<text::ChatRequest> r = chat_of(R"({"messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}], "name": "ann"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1"}]})",
                                        error);
  ASSERT_TRUE(r.has_value()) << error.message;
  EXPECT_TRUE(r->add_generation_prompt);
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0]["role"], "system");  // developer is the system prompt
  EXPECT_EQ(r->messages[0]["content"], "Be brief.");
  EXPECT_EQ(r->messages[1]["content"], "Hello\nthere");
  EXPECT_EQ(r->messages[1]["name"], "ann");
  EXPECT_EQ(r->messages[2]["content"], "");
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(r->messages[3]["tool_call_id"], "c1");
  EXPECT_FALSE(r->tools.has_value());
}

TEST(ChatRequest, ToolsKeepTheirKeyOrder) {
  ApiError error;
  Result<text::ChatRequest> r = chat_of(
      R"({"messages": [{"role": "user", "content": "hi"}],
          "tools": [{"type": "function", "function": {"name": "z", "description": "d", "parameters": {}}}],
          "tool_choice": "auto", "response_format": {"type": "text"}, "chat_template_kwargs": {"enable_thinking": false}})",
      error);
  ASSERT_TRUE(r.has_value()) << error.message;
  ASSERT_TRUE(r->tools.has_value());
  EXPECT_EQ(r->tools->dump(), R"([{"type":"function","function":{"name":"z","description":"d","parameters":{}}}])");
  EXPECT_EQ(r->extra["enable_thinking"], false);
  // tool_choice "none" leaves the tools out of the prompt
  r = chat_of(
      R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}], "tool_choice": "none"})",
      error);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->tools.has_value());
}

TEST(ChatRequest, ErrorsNameTheElement) {
  expect_chat_error(R"({})", "messages", "Missing required parameter: 'messages'");
  expect_chat_error(R"({"messages": "hi"})", "messages", "messages is a string: expected an array");
  expect_chat_error(R"({"messages": []})", "messages", "empty array");
  expect_chat_error(R"({"messages": [3]})", "messages", "messages[0] is an integer, not a message object");
  expect_chat_error(R"({"messages": [{"content": "x"}]})", "messages", "messages[0].role is required");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "x"}]})",
                    "messages", "messages[1].role 'robot' is not one of");
  expect_chat_error(R"({"messages": [{"role": "user"}]})", "messages",
                    "messages[0].content is required for role 'user'");
  expect_chat_error(R"({"messages": [{"role": "user", "content": 5}]})", "messages",
                    "messages[0].content is an integer: expected a string or an array of content parts");
  expect_chat_error(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}]})",
      "messages", "messages[0].content[1] has type 'image_url': this model takes only text parts");
  expect_chat_error(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages",
                    "messages[0].content[0].text is required");
  expect_chat_error(R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages",
                    "messages[0].content[0] is a string, not a content part object");
  const std::string ok = R"("messages": [{"role": "user", "content": "hi"}])";
  expect_chat_error("{" + ok + R"(, "tools": {}})", "tools", "expected an array of tools");
  expect_chat_error("{" + ok + R"(, "tools": [1]})", "tools", "tools[0] is an integer");
  expect_chat_error("{" + ok + R"(, "tool_choice": "required"})", "tool_choice", "not supported");
  expect_chat_error("{" + ok + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})", "tool_choice",
                    "not supported");
  expect_chat_error("{" + ok + R"(, "response_format": {"type": "json_object"}})", "response_format",
                    "only {\"type\": \"text\"} is");
  expect_chat_error("{" + ok + R"(, "chat_template_kwargs": []})", "chat_template_kwargs", "expected an object");
}

}  // namespace
}  // namespace prism::api

// tests/api/errors_test.cpp: OpenAI-shaped errors, the Status -> HTTP mapping, the JSON
// field reader handlers validate with, and the API key check.
#include "api/errors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/auth.h"
#include "api/json_fields.h"

namespace prism::api {
namespace {

std::string header(const Response& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(Errors, JsonShapeHasAllFourFieldsWithNulls) {
  nlohmann::json j = nlohmann::json::parse(error_json(server_error()));
  ASSERT_TRUE(j["error"].is_object());
  EXPECT_EQ(j["error"]["message"], "The server had an error while processing your request.");
  EXPECT_EQ(j["error"]["type"], "server_error");
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "internal_error");
}

TEST(Errors, FieldErrorNamesTheField) {
  ApiError e = invalid_field("temperature", "must be between 0 and 2.");
  EXPECT_EQ(e.status, 400);
  nlohmann::json j = nlohmann::json::parse(error_json(e));
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("'temperature'"), std::string::npos);
}

TEST(Errors, InvalidUtf8InAMessageDoesNotBreakTheBody) {
  nlohmann::json j = nlohmann::json::parse(error_json(model_not_found("bad\xff\xfe")));
  EXPECT_EQ(j["error"]["code"], "model_not_found");
}

TEST(Errors, HeadersForRetryAndAllow) {
  Response r = error_response(overloaded(3));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(header(r, "Retry-After"), "3");
  Response m = error_response(method_not_allowed("PUT", "/v1/models", "GET"));
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(header(m, "Allow"), "GET");
  EXPECT_EQ(error_response(not_ready("loading")).status, 503);
  EXPECT_EQ(error_response(body_too_large(10)).status, 413);
  EXPECT_EQ(error_response(request_timeout()).status, 504);
  EXPECT_EQ(error_response(unauthorized(true)).status, 401);
}

TEST(Errors, StatusMapping) {
  const std::vector<std::pair<StatusCode, int>> table = {
      {StatusCode::invalid_argument, 400}, {StatusCode::out_of_range, 400},
      {StatusCode::failed_precondition, 400}, {StatusCode::not_found, 404},
      {StatusCode::resource_exhausted, 429}, {StatusCode::unimplemented, 501},
      {StatusCode::unavailable, 503}, {StatusCode::data_loss, 500},
      {StatusCode::internal, 500}};
  for (auto [code, http] : table) {
    EXPECT_EQ(http_status_for(code), http) << status_code_name(code);
    EXPECT_EQ(from_status(Status(code, "m")).status, http) << status_code_name(code);
  }
  EXPECT_EQ(from_status(resource_exhausted("queue full")).retry_after_s, 1);
  EXPECT_EQ(from_status(invalid_argument("bad dims"), "dimensions").param, "dimensions");
}

TEST(Errors, InternalStatusTextIsNotShown) {
  ApiError e = from_status(prism::internal_error("segfault in /home/x/model.cpp:42"));
  EXPECT_EQ(e.status, 500);
  EXPECT_EQ(error_json(e).find("model.cpp"), std::string::npos);
}

TEST(JsonFields, ReadsTypedFields) {
  JsonFields f(R"({"model":"m","input":["a","b"],"n":3,"t":0.5,"stream":true,"fmt":"float"})");
  EXPECT_EQ(f.required_string("model"), "m");
  EXPECT_EQ(f.required_strings("input"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.optional_int("n", 1, 1, 10), 3);
  EXPECT_DOUBLE_EQ(f.optional_number("t", 1.0, 0.0, 2.0), 0.5);
  EXPECT_TRUE(f.optional_bool("stream", false));
  EXPECT_EQ(f.optional_enum("fmt", {"float", "base64"}, "float"), "float");
  EXPECT_EQ(f.optional_int("absent", 7), 7);
  EXPECT_TRUE(f.ok());
}

TEST(JsonFields, InvalidJsonIs400) {
  JsonFields f("{\"model\": ");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().status, 400);
  EXPECT_EQ(f.error().code, "invalid_json");
  JsonFields g("[1,2]");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("object"), std::string::npos);
}

// Each bad body yields a 400 naming the field it is about.
TEST(JsonFields, WrongTypesAndValuesNameTheField) {
  struct Case {
    std::string body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {R"({})", "model"},
      {R"({"model": 5})", "model"},
      {R"({"model":"m","input": 3})", "input"},
      {R"({"model":"m","input": []})", "input"},
      {R"({"model":"m","input": ["a", 2]})", "input[1]"},
      {R"({"model":"m","input":"x","n": 1.5})", "n"},
      {R"({"model":"m","input":"x","n": 11})", "n"},
      {R"({"model":"m","input":"x","n": 18446744073709551615})", "n"},
      {R"({"model":"m","input":"x","t": "hot"})", "t"},
      {R"({"model":"m","input":"x","t": 2.5})", "t"},
      {R"({"model":"m","input":"x","stream": "yes"})", "stream"},
      {R"({"model":"m","input":"x","fmt": "int8"})", "fmt"},
  };
  for (const Case& c : cases) {
    JsonFields f(c.body);
    f.required_string("model");
    f.required_strings("input");
    f.optional_int("n", 1, 1, 10);
    f.optional_number("t", 1.0, 0.0, 2.0);
    f.optional_bool("stream", false);
    f.optional_enum("fmt", {"float", "base64"}, "float");
    ASSERT_FALSE(f.ok()) << c.body;
    EXPECT_EQ(f.error().status, 400) << c.body;
    EXPECT_EQ(f.error().param, c.param) << c.body;
    EXPECT_NE(f.error().message.find(c.param), std::string::npos) << f.error().message;
  }
}

TEST(JsonFields, FirstErrorWins) {
  JsonFields f(R"({"a": 1, "b": 2})");
  f.required_string("a");
  f.required_string("b");
  EXPECT_EQ(f.error().param, "a");
}

TEST(JsonFields, NestedObjectPrefix) {
  nlohmann::json j = nlohmann::json::parse(R"({"prism":{"priority":"bulkk"}})");
  JsonFields f(j["prism"], "prism.");
  f.optional_enum("priority", {"online", "bulk"}, "online");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().param, "prism.priority");
}

TEST(ApiKeyAuth, DisabledWithoutKeys) {
  ApiKeyAuth auth({}, {"/health"});
  EXPECT_FALSE(auth.check("/v1/models", "").has_value());
}

TEST(ApiKeyAuth, BearerKeysAndOpenPaths) {
  ApiKeyAuth auth({"k1", "k2"}, {"/health", "/static/*"});
  EXPECT_FALSE(auth.check("/v1/models", "Bearer k1").has_value());
  EXPECT_FALSE(auth.check("/v1/models", "bearer  k2 ").has_value());
  EXPECT_FALSE(auth.check("/health", "").has_value());
  EXPECT_FALSE(auth.check("/static/app.js", "").has_value());
  ASSERT_TRUE(auth.check("/healthz", "").has_value());
  EXPECT_EQ(auth.check("/v1/models", "")->status, 401);
  EXPECT_NE(auth.check("/v1/models", "")->message.find("didn't provide"), std::string::npos);
  EXPECT_NE(auth.check("/v1/models", "Bearer k3")->message.find("Incorrect"), std::string::npos);
  EXPECT_TRUE(auth.check("/v1/models", "Bearer k").has_value());
  EXPECT_TRUE(auth.check("/v1/models", "Bearer k11").has_value());
  EXPECT_TRUE(auth.check("/v1/models", "Basic k1").has_value());
  EXPECT_TRUE(auth.check("/v1/models", "Bearer ").has_value());
}

}  // namespace
}  // namespace prism::api

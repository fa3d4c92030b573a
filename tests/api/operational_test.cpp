// tests/api/operational_test.cpp: what /ready and /v1/models answer, and what a request to a
// deployment that failed to load gets, with deployments in every state (one failed among
// served ones included): JSON shapes, HTTP statuses, headers.
#include "api/routes/operational.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "api/routes/deployment_call.h"
#include "serving/deployment_set.h"
#include "serving/echo_engine.h"

namespace prism::api {
namespace {

using serving::DeploymentInfo;
using serving::DeploymentState;

constexpr const char* kReason = "deployment c replica 0: oneDNN has no matmul for linear 64->128 in bf16";

DeploymentInfo info(const std::string& name, DeploymentState state, std::string error = {}) {
  DeploymentInfo i;
  i.name = name;
  i.task = "echo";
  i.modality = "test";
  i.precision = "f32";
  i.replicas = 1;
  i.state = state;
  i.ready = state == DeploymentState::ready;
  i.error = std::move(error);
  return i;
}

std::string header(const Response& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Operational, ModelObjectShowsAFailedLoadAndItsReason) {
  nlohmann::json failed = model_object(info("c", DeploymentState::failed, kReason), 1764500000);
  EXPECT_EQ(failed["id"], "c");
  EXPECT_EQ(failed["object"], "model");
  EXPECT_EQ(failed["created"], 1764500000);
  EXPECT_EQ(failed["owned_by"], "prism");
  EXPECT_EQ(failed["prism"]["state"], "failed");
  EXPECT_EQ(failed["prism"]["ready"], false);
  EXPECT_EQ(failed["prism"]["error"], kReason);
  EXPECT_EQ(failed["prism"]["task"], "echo");

  nlohmann::json ready = model_object(info("a", DeploymentState::ready), 1);
  EXPECT_EQ(ready["prism"]["state"], "ready");
  EXPECT_EQ(ready["prism"]["ready"], true);
  EXPECT_FALSE(ready["prism"].contains("error"));  // only a failed load has a reason
}

TEST(Operational, ReadyWhenEveryDeploymentIsReady) {
  Response r = ready_response({info("a", DeploymentState::ready), info("b", DeploymentState::ready)});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body),
            nlohmann::json::parse(R"({"status": "ready", "deployments": {"a": "ready", "b": "ready"}})"));
}

TEST(Operational, NotReadyNamesEachDeploymentWithItsStateAndReason) {
  Response r = ready_response({info("a", DeploymentState::ready), info("c", DeploymentState::failed, kReason),
                               info("d", DeploymentState::loading)});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(header(r, "Retry-After"), "1");  // a probe polls again: d may still get ready
  nlohmann::json j = nlohmann::json::parse(r.body);
  // The OpenAI error a 503 client reads...
  EXPECT_EQ(j["error"]["type"], "server_error");
  EXPECT_EQ(j["error"]["code"], "service_unavailable");
  EXPECT_TRUE(j["error"]["param"].is_null());
  const std::string message = j["error"]["message"];
  EXPECT_EQ(message, std::string("Not ready: c (failed: ") + kReason + "), d (loading).");
  // ...and the facts: every deployment's state, each failed one's reason.
  EXPECT_EQ(j["status"], "not_ready");
  EXPECT_EQ(j["deployments"], nlohmann::json::parse(R"({"a": "ready", "c": "failed", "d": "loading"})"));
  EXPECT_EQ(j["failed"], nlohmann::json({{"c", kReason}}));
}

TEST(Operational, NotReadyWithoutDeployments) {
  Response r = ready_response({});
  EXPECT_EQ(r.status, 503);
  nlohmann::json j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["error"]["message"], "Not ready: no deployment is configured.");
  EXPECT_TRUE(j["deployments"].empty());
}

TEST(Operational, LoadFailedIsA503WithoutRetryAfter) {
  ApiError e = load_failed("c", invalid_argument(kReason));
  Response r = error_response(e);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(header(r, "Retry-After"), "");  // retrying does not help: the deployment stays failed
  nlohmann::json j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["error"]["type"], "server_error");
  EXPECT_EQ(j["error"]["code"], "model_load_failed");
  EXPECT_EQ(j["error"]["message"], std::string("The model 'c' failed to load and is not served: ") + kReason);
}

// A real set: "a" serves, "c" failed at load (the echo engine's fail_load knob).
class FailedDeployment : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(set_.add(config("a", false), serving::echo_engine_factory()).ok());
    ASSERT_TRUE(set_.add(config("c", true), serving::echo_engine_factory()).ok());
    set_.start_all();
    ASSERT_TRUE(set_.wait_loaded(/*strict=*/false).ok());
  }
  static serving::DeploymentConfig config(const std::string& name, bool fail) {
    serving::DeploymentConfig c;
    c.name = name;
    c.task = "echo";
    if (fail) c.knobs.set("fail_load", true);
    return c;
  }
  serving::MetricsRegistry metrics_;
  serving::DeploymentSet set_{metrics_};
};

TEST_F(FailedDeployment, RequestsToItGet503NamingItAndTheReason) {
  ApiError error;
  Result<serving::Deployment*> c = find_deployment(set_, "c", "echo", error);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.status().code(), StatusCode::unavailable);
  EXPECT_EQ(error.status, 503);
  EXPECT_EQ(error.code, "model_load_failed");
  EXPECT_TRUE(contains(error.message, "The model 'c' failed to load")) << error.message;
  EXPECT_TRUE(contains(error.message, "deployment c replica 0: ")) << error.message;
  EXPECT_TRUE(contains(error.message, "fail_load")) << error.message;

  // The wrong task is still the client's mistake first; an unknown model still 404.
  ApiError wrong;
  EXPECT_FALSE(find_deployment(set_, "c", "embed", wrong).has_value());
  EXPECT_EQ(wrong.status, 400);
  ApiError none;
  EXPECT_FALSE(find_deployment(set_, "nope", "echo", none).has_value());
  EXPECT_EQ(none.status, 404);

  // Routes that submit without find_deployment get the same answer.
  serving::Deployment* direct = set_.find("c").value();
  serving::RequestPtr r = serving::make_request(std::make_unique<serving::EchoPayload>("x"), [](auto) {});
  std::optional<ApiError> refused = submit_to(*direct, r);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, "model_load_failed");
}

TEST_F(FailedDeployment, OthersServeAndTheOperationalRoutesTellWhy) {
  ApiError error;
  Result<serving::Deployment*> a = find_deployment(set_, "a", "echo", error);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE((*a)->ready());

  Response ready = ready_response(set_.infos());
  EXPECT_EQ(ready.status, 503);
  nlohmann::json j = nlohmann::json::parse(ready.body);
  EXPECT_EQ(j["deployments"], nlohmann::json::parse(R"({"a": "ready", "c": "failed"})"));
  ASSERT_TRUE(j["failed"].contains("c"));
  EXPECT_TRUE(contains(j["failed"]["c"], "fail_load"));
  EXPECT_FALSE(j["failed"].contains("a"));
  EXPECT_TRUE(contains(j["error"]["message"], "c (failed: deployment c replica 0: "));

  std::vector<DeploymentInfo> infos = set_.infos();
  ASSERT_EQ(infos.size(), 2u);
  nlohmann::json c = model_object(infos[1], 0);
  EXPECT_EQ(c["id"], "c");
  EXPECT_EQ(c["prism"]["state"], "failed");
  EXPECT_TRUE(contains(c["prism"]["error"], "fail_load"));
  EXPECT_EQ(model_object(infos[0], 0)["prism"]["engine"], "echo");
}

}  // namespace
}  // namespace prism::api

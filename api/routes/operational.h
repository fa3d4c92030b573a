// api/routes/operational.h: the routes that say how the server is, not what a model computes:
//   GET /health            liveness: 200 while the process serves HTTP (open even with api keys)
//   GET /ready             200 when every deployment is loaded, else 503 naming those that are
//                          not, with each state and each load failure's reason
//   GET /v1/models         OpenAI's model list, one entry per deployment (failed ones too, with
//                          their reason), with a `prism` object
//   GET /v1/models/{model} one entry, or 404
//   GET /metrics           Prometheus text exposition 0.0.4 of the serving metrics registry
// Must not: block, or show model paths and other server internals, except in the reason of a
// failed load: that is the load error as logged (it may name the model's files), shown because
// the operator needs it to fix the deployment.
#pragma once

#include <cstdint>
#include <vector>

#include "api/router.h"
#include "serving/deployment_set.h"
#include "serving/metrics.h"

namespace prism::api {

struct OperationalContext {
  const serving::DeploymentSet* deployments = nullptr;  // not owned; outlives the server
  const serving::MetricsRegistry* metrics = nullptr;    // not owned; outlives the server
  int64_t created_unix_s = 0;                           // `created` of every model: server start
};

void add_operational_routes(Router& router, const OperationalContext& context);

// The OpenAI model object of one deployment (exposed for tests and other routes).
nlohmann::json model_object(const serving::DeploymentInfo& info, int64_t created_unix_s);

// GET /ready's answer for these deployments (exposed for tests):
//   200 {"status": "ready", "deployments": {NAME: "ready", ...}} when every one is ready;
//   503 {"error": {...OpenAI error naming each one not ready...}, "status": "not_ready",
//        "deployments": {NAME: STATE, ...}, "failed": {NAME: REASON, ...}} otherwise.
Response ready_response(const std::vector<serving::DeploymentInfo>& infos);

}  // namespace prism::api

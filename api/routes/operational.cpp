// api/routes/operational.cpp: health, readiness, the model list and metrics.
#include "api/routes/operational.h"

#include <nlohmann/json.hpp>

#include "api/errors.h"

namespace prism::api {

namespace {

constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

Response json_response(const nlohmann::json& j) {
  // replace: a name or knob with invalid UTF-8 must not make dump() throw on an I/O thread.
  return Response::json(200, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void list_models(const OperationalContext& c, Responder responder) {
  nlohmann::json data = nlohmann::json::array();
  for (const serving::DeploymentInfo& i : c.deployments->infos()) data.push_back(model_object(i, c.created_unix_s));
  responder.send(json_response({{"object", "list"}, {"data", std::move(data)}}));
}

void get_model(const OperationalContext& c, const Request& request, Responder responder) {
  const std::string_view id = request.path_param("model");
  for (const serving::DeploymentInfo& i : c.deployments->infos()) {
    if (i.name == id) {
      responder.send(json_response(model_object(i, c.created_unix_s)));
      return;
    }
  }
  responder.send(error_response(model_not_found(id)));
}

}  // namespace

nlohmann::json model_object(const serving::DeploymentInfo& info, int64_t created_unix_s) {
  // What the engine describes (embedding_dims, embedding_space_id, ...) first, so the
  // framework's own facts win a name clash.
  nlohmann::json prism = info.engine.is_object() ? info.engine : nlohmann::json::object();
  prism["task"] = info.task;
  prism["modality"] = info.modality;
  prism["precision"] = info.precision;
  prism["replicas"] = info.replicas;
  prism["state"] = serving::deployment_state_name(info.state);
  prism["ready"] = info.ready;
  if (!info.error.empty()) prism["error"] = info.error;  // why it failed to load
  return {{"id", info.name},
          {"object", "model"},
          {"created", created_unix_s},
          {"owned_by", "prism"},
          {"prism", std::move(prism)}};
}

Response ready_response(const std::vector<serving::DeploymentInfo>& infos) {
  nlohmann::json states = nlohmann::json::object();
  nlohmann::json failed = nlohmann::json::object();
  std::string not_ready_list;
  for (const serving::DeploymentInfo& i : infos) {
    const std::string state(serving::deployment_state_name(i.state));
    states[i.name] = state;
    if (i.ready) continue;
    not_ready_list += (not_ready_list.empty() ? "" : ", ") + i.name + " (" + state;
    if (!i.error.empty()) {
      failed[i.name] = i.error;
      not_ready_list += ": " + i.error;
    }
    not_ready_list += ")";
  }
  if (infos.empty()) not_ready_list = "no deployment is configured";
  if (not_ready_list.empty()) return json_response({{"status", "ready"}, {"deployments", states}});
  // An OpenAI error (what clients of a 503 read) plus the same facts as a 200, so a probe
  // or an operator sees which deployments serve and why the others do not.
  const ApiError e = not_ready("Not ready: " + not_ready_list + ".");
  Response r = error_response(e);
  nlohmann::json body = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return r;
  body["status"] = "not_ready";
  body["deployments"] = std::move(states);
  body["failed"] = std::move(failed);
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

void add_operational_routes(Router& router, const OperationalContext& context) {
  const OperationalContext c = context;
  router.add("GET", "/health", [](const Request&, Responder r) {
    r.send(Response::json(200, R"({"status":"ok"})"));
  });
  router.add("GET", "/ready", [c](const Request&, Responder r) { r.send(ready_response(c.deployments->infos())); });
  router.add("GET", "/v1/models", [c](const Request&, Responder r) { list_models(c, std::move(r)); });
  router.add("GET", "/v1/models/{model}",
             [c](const Request& req, Responder r) { get_model(c, req, std::move(r)); });
  router.add("GET", "/metrics", [c](const Request&, Responder r) {
    r.send(Response{200, kPrometheusContentType, {}, c.metrics->render()});
  });
}

}  // namespace prism::api

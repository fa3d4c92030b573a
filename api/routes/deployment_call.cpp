// api/routes/deployment_call.cpp: the shared steps of model routes.
#include "api/routes/deployment_call.h"

#include <algorithm>
#include <memory>

namespace prism::api {

Result<serving::Deployment*> find_deployment(const serving::DeploymentSet& deployments, std::string_view model,
                                             std::string_view task, ApiError& error) {
  Result<serving::Deployment*> found = deployments.find(model);
  if (!found.has_value()) {
    error = model_not_found(model);
    return found.status();
  }
  serving::Deployment* d = found.value();
  if (d->config().task != task) {
    error = invalid_field("model", "the model '" + std::string(model) + "' serves task '" + d->config().task +
                                       "', not '" + std::string(task) + "'");
    return invalid_argument(error.message);
  }
  // ready() first: one atomic load on the hot path; the lock only for a deployment not serving.
  if (!d->ready()) {
    if (Status failure = d->load_error(); !failure.ok()) {
      error = load_failed(d->name(), failure);
      return unavailable(error.message);
    }
  }
  return d;
}

ApiError load_failed(std::string_view model, const Status& load_error) {
  ApiError e = not_ready("The model '" + std::string(model) + "' failed to load and is not served: " +
                         load_error.message());
  // Not "retry later": the deployment stays failed until the server is restarted with it fixed.
  e.code = "model_load_failed";
  e.retry_after_s = 0;
  return e;
}

serving::Lane read_priority(JsonFields& fields) {
  std::string p = fields.optional_enum("priority", {"online", "bulk"}, "online");
  return p == "bulk" ? serving::Lane::bulk : serving::Lane::online;
}

std::optional<ApiError> submit_to(serving::Deployment& deployment, const serving::RequestPtr& request) {
  Status s = deployment.submit(request);
  if (s.ok()) return std::nullopt;
  if (s.code() == StatusCode::resource_exhausted) return overloaded(1, "The model '" + deployment.name() + "'");
  if (s.code() == StatusCode::unavailable) {
    // Routes that skip find_deployment (WebSocket, live streams) still name a failed load.
    if (Status failure = deployment.load_error(); !failure.ok()) return load_failed(deployment.name(), failure);
    return not_ready(s.message());
  }
  return from_status(s);
}

void cancel_on_disconnect(Responder& responder, const serving::RequestPtr& request) {
  // weak: the callback may outlive the request (a connection kept alive after it completed).
  std::weak_ptr<serving::Request> weak = request;
  responder.on_cancel([weak] {
    if (auto r = weak.lock()) r->cancel();
  });
}

void submit_or_refuse(serving::Deployment& deployment, serving::PayloadPtr payload, serving::Completion on_complete,
                      int64_t cost_tokens, serving::Lane lane, Responder& responder) {
  serving::RequestPtr request = serving::make_request(std::move(payload), std::move(on_complete));
  request->cost_tokens = std::max<int64_t>(1, cost_tokens);
  request->lane = lane;
  request->request_id = responder.request_id();
  if (auto refused = submit_to(deployment, request)) return (void)responder.send(error_response(*refused));
  cancel_on_disconnect(responder, request);
}

void post_or_refuse(serving::WorkPool& pool, Responder responder, std::string_view what,
                    std::function<void(Responder)> job) {
  const bool posted = pool.try_post([responder, job = std::move(job)]() mutable {
    if (responder.cancelled()) return;  // the client left while the job waited
    job(std::move(responder));
  });
  if (!posted) responder.send(error_response(overloaded(1, what)));
}

ApiError completion_error(const Status& status) {
  if (status.code() == StatusCode::unavailable) return not_ready(status.message());
  return from_status(status);
}

}  // namespace prism::api

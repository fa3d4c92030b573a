// api/routes/deployment_call.h: what every model route does around its deployment, so each
// route file is left with its own parsing and response shape: find the model (404), check
// its task (400 naming `model`) and that it did not fail to load (503 with the reason), read
// the `priority` lane, submit (429 with Retry-After when the queue is full, 503 when not
// ready), link client cancellation to the queued request, and map a failed completion to the
// client's error.
// Must not: know any engine's payload type, or block (it runs on I/O threads).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/errors.h"
#include "api/http_types.h"
#include "api/json_fields.h"
#include "base/status.h"
#include "serving/deployment_set.h"
#include "serving/request.h"
#include "serving/work_pool.h"

namespace prism::api {

// The deployment serving `model` for `task`: 404 when no deployment has that name, 400
// (param "model") when it serves another task, 503 load_failed() when it failed to load.
// A deployment still loading or stopping is returned: submit_to answers it.
Result<serving::Deployment*> find_deployment(const serving::DeploymentSet& deployments, std::string_view model,
                                             std::string_view task, ApiError& error);

// 503, code "model_load_failed", no Retry-After (retrying does not help): the model's name and
// why its load failed. The reason is the load error as logged: it may name the model's files.
ApiError load_failed(std::string_view model, const Status& load_error);

// Reads the optional "priority" field: "online" (default) or "bulk".
serving::Lane read_priority(JsonFields& fields);

// Submits the request; on refusal returns the client's error (429 + Retry-After for a full
// queue, 503 when the deployment is not ready or stopping).
std::optional<ApiError> submit_to(serving::Deployment& deployment, const serving::RequestPtr& request);

// The ready deployment's frontend as its task's type F, where routes would downcast:
// unavailable ("The model 'MODEL' is not ready yet.": a 503 through completion_error) while it
// loads; internal_error naming the deployment's task when its frontend is of another type (a
// task registered with the wrong frontend: a bug).
template <class F>
Result<std::shared_ptr<const F>> frontend_of(const serving::Deployment& deployment, std::string_view model) {
  const serving::FrontendPtr frontend = deployment.frontend();
  if (frontend == nullptr) return unavailable("The model '" + std::string(model) + "' is not ready yet.");
  if (auto typed = std::dynamic_pointer_cast<const F>(frontend)) return typed;
  return internal_error("deployment '" + deployment.name() + "' of task \"" + deployment.config().task +
                        "\" has a frontend of another task");
}

// Runs job(responder) on `pool`, off the I/O thread (blocking preparation: media fetch and
// decode); skipped when the client left while it waited. A full pool answers 429 with
// Retry-After: 1, naming `what`.
void post_or_refuse(serving::WorkPool& pool, Responder responder, std::string_view what,
                    std::function<void(Responder)> job);

// When the client goes away (disconnect, request deadline), the queued request is cancelled:
// it is skipped when batches form, or a looping engine stops it between steps.
void cancel_on_disconnect(Responder& responder, const serving::RequestPtr& request);

// What a route does once its payload is ready: builds the request (cost in tokens, at least
// 1; lane; the HTTP request's id, the responder's), then submit_to + cancel_on_disconnect,
// answering the client itself when the request is refused. Any thread.
void submit_or_refuse(serving::Deployment& deployment, serving::PayloadPtr payload, serving::Completion on_complete,
                      int64_t cost_tokens, serving::Lane lane, Responder& responder);

// The client's error for a request that completed with a non-ok status (engine failure,
// deadline, shutdown). Cancelled requests have no client left: callers skip them.
ApiError completion_error(const Status& status);

}  // namespace prism::api

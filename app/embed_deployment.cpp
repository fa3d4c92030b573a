// app/embed_deployment.cpp: one "embed" deployment, configured for a bulk job, and the
// request/completion round trip the embeddings route makes, ending in a future.
#include "app/embed_deployment.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "app/engines.h"
#include "frontends/embed_payload.h"
#include "serving/config.h"
#include "serving/request.h"

namespace prism::app {

namespace {

constexpr const char* kName = "embed";  // in the deployment's log lines only

serving::DeploymentConfig deployment_config(const EmbedDeploymentOptions& o) {
  serving::DeploymentConfig c;
  c.name = kName;
  c.task = "embed";
  c.model = o.model;
  c.precision = o.precision;
  c.timeout_ms = 0;  // a batch takes what it takes: a job has no client to time out
  c.batching.max_batch_size = 1;  // one request is one batch the caller cut (the header's NOTE)
  c.batching.max_batch_tokens = std::clamp<int64_t>(o.batch_tokens, 1, int64_t{1} << 32);
  return c;
}

// The deployment prefixes a load failure with "deployment NAME replica I: "; a command says
// what failed in the loader's own words, as it did when it loaded the model itself.
Status loader_words(const Status& s) {
  const std::string prefix = std::string("deployment ") + kName + " replica 0: ";
  if (!s.message().starts_with(prefix)) return s;
  return Status(s.code(), s.message().substr(prefix.size()));
}

}  // namespace

Result<std::unique_ptr<EmbedDeployment>> EmbedDeployment::start(const EmbedDeploymentOptions& options) {
  const serving::DeploymentConfig config = deployment_config(options);
  PRISM_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<EmbedDeployment> d(new EmbedDeployment());
  PRISM_RETURN_IF_ERROR(d->deployments_.add(config, make_engines()));
  d->deployment_ = d->deployments_.deployments().front().get();
  d->deployments_.start_all();
  PRISM_RETURN_IF_ERROR(loader_words(d->deployments_.wait_ready()));
  d->frontend_ = std::dynamic_pointer_cast<const frontends::EmbedFrontend>(d->deployment_->frontend());
  if (d->frontend_ == nullptr) return internal_error("the embed deployment has no EmbedFrontend");
  return d;
}

EmbedDeployment::~EmbedDeployment() { deployments_.stop_all(); }

Result<EmbedVectors> EmbedDeployment::submit(std::vector<std::vector<int32_t>> sequences, int64_t dims) {
  int64_t tokens = 0;
  for (const std::vector<int32_t>& s : sequences) tokens += static_cast<int64_t>(s.size());
  auto payload = std::make_unique<frontends::EmbedInput>();
  payload->sequences = std::move(sequences);
  payload->dims = dims;
  auto promise = std::make_shared<std::promise<Result<std::vector<float>>>>();
  EmbedVectors vectors = promise->get_future();
  serving::RequestPtr request =
      serving::make_request(std::move(payload), [promise](Result<serving::PayloadPtr> result) {
        if (!result.has_value()) return promise->set_value(result.status());
        auto* output = dynamic_cast<frontends::EmbedOutput*>(result.value().get());
        if (output == nullptr) return promise->set_value(internal_error("the embed engine returned another payload"));
        promise->set_value(std::move(output->vectors));
      });
  request->cost_tokens = std::max<int64_t>(tokens, 1);
  request->lane = serving::Lane::online;  // the engine runs online requests whole (bulk ones in small chunks)
  PRISM_RETURN_IF_ERROR(deployment_->submit(std::move(request)));
  return vectors;
}

Result<std::vector<float>> EmbedDeployment::embed(std::vector<std::vector<int32_t>> sequences, int64_t dims) {
  PRISM_ASSIGN_OR_RETURN(EmbedVectors vectors, submit(std::move(sequences), dims));
  return vectors.get();
}

}  // namespace prism::app

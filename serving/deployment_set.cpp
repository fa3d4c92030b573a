// serving/deployment_set.cpp: lookup and whole-server lifecycle.
#include "serving/deployment_set.h"

#include <algorithm>

#include "base/log.h"

namespace prism::serving {

DeploymentSet::DeploymentSet(MetricsRegistry& metrics) : metrics_(metrics) {}

DeploymentSet::~DeploymentSet() { stop_all(); }

Status DeploymentSet::add(const DeploymentConfig& config, EngineKind kind) {
  for (const auto& d : deployments_)
    if (d->name() == config.name) return invalid_argument("duplicate deployment name '" + config.name + "'");
  deployments_.push_back(std::make_unique<Deployment>(config, std::move(kind), metrics_));
  return {};
}

Status DeploymentSet::add(const DeploymentConfig& config, const EngineFactories& engines) {
  Result<EngineKind> kind = engines.find(config.task);
  if (!kind.has_value())
    return Status(kind.status().code(), "deployment " + config.name + ": " + kind.status().message());
  return add(config, std::move(kind).value());
}

Status DeploymentSet::add_all(const Config& config, const EngineFactories& engines) {
  for (const DeploymentConfig& d : config.deployments) PRISM_RETURN_IF_ERROR(add(d, engines));
  return {};
}

void DeploymentSet::start_all() {
  // Deployments load concurrently: each replica loads on its own thread.
  for (auto& d : deployments_) d->start();
}

Status DeploymentSet::wait_ready() {
  for (auto& d : deployments_) PRISM_RETURN_IF_ERROR(d->wait_ready());
  return {};
}

Status DeploymentSet::wait_loaded(bool strict) {
  if (strict) return wait_ready();
  std::vector<Status> failures;
  size_t num_ready = 0;
  for (auto& d : deployments_) {
    Status s = d->wait_ready();
    if (s.ok()) ++num_ready;
    else failures.push_back(std::move(s));  // failed, or stopping (a signal during start-up)
  }
  if (num_ready == 0) {
    if (failures.empty()) return failed_precondition("no deployment to serve");
    if (failures.size() == 1) return failures.front();
    std::string reasons;
    for (const Status& f : failures) reasons += (reasons.empty() ? "" : "; ") + f.message();
    return Status(failures.front().code(), "every deployment failed to load: " + reasons);
  }
  for (auto& d : deployments_) {
    if (d->ready()) continue;
    PRISM_LOG_WARN("deployment {} is not served: the server continues with the other deployments "
                   "(requests to it get 503; [server] strict = true or --strict stops instead)",
                   d->name());
  }
  return {};
}

bool DeploymentSet::all_ready() const {
  return !deployments_.empty() &&
         std::all_of(deployments_.begin(), deployments_.end(), [](const auto& d) { return d->ready(); });
}

Result<Deployment*> DeploymentSet::find(std::string_view model) const {
  for (const auto& d : deployments_)
    if (d->name() == model) return d.get();
  return not_found("The model '" + std::string(model) + "' does not exist");
}

std::vector<DeploymentInfo> DeploymentSet::infos() const {
  std::vector<DeploymentInfo> out;
  out.reserve(deployments_.size());
  for (const auto& d : deployments_) out.push_back(d->info());
  return out;
}

void DeploymentSet::stop_all(std::chrono::milliseconds grace) {
  for (auto& d : deployments_) d->close();
  const auto start = std::chrono::steady_clock::now();
  const bool unlimited = grace >= std::chrono::hours(24 * 365);
  for (auto& d : deployments_) {
    auto left = grace;
    if (!unlimited) {
      auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      left = std::max(std::chrono::milliseconds(0), grace - spent);
    }
    d->stop(left);
  }
}

}  // namespace prism::serving

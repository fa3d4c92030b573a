// serving/deployment_set.h: every deployment of the server, found by model name. The api
// routes each request with find(); /ready and /v1/models read infos(). One deployment that
// fails to load never takes the others down: it stays in the set, failed, with its reason.
// NOTE: the set is built before start_all() and frozen afterwards, so lookups take no lock.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "serving/config.h"
#include "serving/deployment.h"
#include "serving/engine.h"
#include "serving/metrics.h"

namespace prism::serving {

class DeploymentSet {
 public:
  explicit DeploymentSet(MetricsRegistry& metrics);
  ~DeploymentSet();  // stop_all() without a grace limit
  DeploymentSet(const DeploymentSet&) = delete;
  DeploymentSet& operator=(const DeploymentSet&) = delete;

  // Before start_all only. invalid_argument for a duplicate name; not_found when no engine
  // serves the task.
  Status add(const DeploymentConfig& config, const EngineFactories& engines);
  Status add(const DeploymentConfig& config, EngineKind kind);
  // Every [[deployment]] of the config.
  Status add_all(const Config& config, const EngineFactories& engines);

  void start_all();
  // Blocks until every deployment loaded; the first failure otherwise (config order).
  Status wait_ready();
  // Start-up's wait ([server] strict): blocks until no deployment is loading any more.
  //  strict: wait_ready(): the first failure stops the server.
  //  otherwise a failed deployment is left out and the server serves the others: each one
  //  gets a warn line; ok while at least one deployment is ready. When none is, the reason of
  //  each failure (one failure: its own Status): a server with nothing to serve is useless.
  // Each failure's error line is the deployment's own (logged once when it failed).
  Status wait_loaded(bool strict);
  bool all_ready() const;  // /ready: true when every deployment is ready (and there is one)

  // not_found with OpenAI's wording when no deployment has that name.
  Result<Deployment*> find(std::string_view model) const;
  const std::vector<std::unique_ptr<Deployment>>& deployments() const { return deployments_; }
  std::vector<DeploymentInfo> infos() const;  // in config order

  // Every deployment stops accepting at once, then each drains within the shared grace.
  void stop_all(std::chrono::milliseconds grace = std::chrono::milliseconds::max());

  MetricsRegistry& metrics() const { return metrics_; }

 private:
  MetricsRegistry& metrics_;
  std::vector<std::unique_ptr<Deployment>> deployments_;
};

}  // namespace prism::serving

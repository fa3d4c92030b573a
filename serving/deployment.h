// serving/deployment.h: one model served by N replicas behind one bounded queue.
// A Deployment owns its queue, its replica threads (each owning one Engine) and its
// metrics series. api threads call submit(); only replica threads touch engines.
// NOTE: no lock is held while an engine runs; a replica takes a batch from the queue (which
// locks only to pop), then runs it unlocked. Every accepted request completes exactly once:
// by its engine, or by the framework (cancelled, deadline exceeded, shutting down).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "serving/config.h"
#include "serving/engine.h"
#include "serving/metrics.h"
#include "serving/request.h"
#include "serving/request_queue.h"

namespace prism::serving {

enum class DeploymentState { created, loading, ready, failed, stopping, stopped };
std::string_view deployment_state_name(DeploymentState state);

// What /v1/models and /ready report about a deployment.
struct DeploymentInfo {
  std::string name;
  std::string task;
  std::string modality;   // modality_of_task(task)
  std::string precision;
  std::string model;      // the model directory
  int replicas = 0;
  DeploymentState state = DeploymentState::created;
  bool ready = false;     // every replica loaded and accepting requests
  std::string error;      // why the load failed ("deployment NAME replica I: ..."), when state == failed
  size_t queue_depth = 0;
  int64_t running = 0;    // requests handed to engines and not yet completed
  nlohmann::json engine;  // Engine::describe() of the first replica to load
};

class Deployment {
 public:
  // `queue` null: an InProcessQueue with the policy's queue_capacity. `config` must be valid
  // (Config::validate). `metrics` must outlive the deployment: its series live there.
  Deployment(DeploymentConfig config, EngineKind kind, MetricsRegistry& metrics,
             std::unique_ptr<RequestQueue> queue = nullptr);
  ~Deployment();  // stop() with no grace limit, if still running
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;

  // Starts the replica threads; each builds and loads its engine. Returns at once.
  // NOTE: the first replica to fail marks the whole deployment failed and closes its queue:
  // replicas already loaded leave their loops and free their engines, later ones do not
  // serve. A failed deployment stays failed (no retry); the rest of the server is untouched.
  void start();
  // Before start() only: marks the deployment failed with `reason` without loading it (start-up
  // found it cannot load, e.g. its model directory is missing); start() then does nothing.
  void mark_failed(const Status& reason);
  // Blocks until every replica loaded (ok) or one failed (its Status, naming the deployment);
  // failed_precondition before start().
  Status wait_ready();
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // The load failure ("deployment NAME replica I: ..."); ok unless the state is failed.
  Status load_error() const;
  // The task's frontend (tokenizer, limits), shared with the api; null until the deployment
  // is ready, and for tasks without one.
  FrontendPtr frontend() const { return ready() ? frontend_ : nullptr; }

  // Any thread. ok: the request is queued and its completion will run exactly once.
  // Otherwise the request was not taken and its completion never runs:
  //   unavailable (not ready: loading, failed or stopping), resource_exhausted (queue full).
  // Sets the request's enqueue time and id, tightens its deadline to timeout_ms, and puts
  // bulk requests in the online lane when priority lanes are disabled.
  Status submit(RequestPtr request);

  // Stop accepting requests (submit answers unavailable). Part of stop(); exposed so a set of
  // deployments can all stop accepting before any drains.
  void close();
  // close(), let the replicas drain the queue and finish running requests for up to `grace`,
  // then complete whatever still waits with unavailable, tell looping engines to abort, and
  // join the replicas (a batch in progress always finishes). Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds::max());

  DeploymentInfo info() const;
  const DeploymentConfig& config() const { return config_; }
  const std::string& name() const { return config_.name; }
  const std::string& modality() const { return modality_; }

 private:
  friend class Request;
  friend class ReplicaSource;

  void replica_main(int index);
  // Records the first load failure (logged once, at error) and moves loading/created to
  // failed. Returns true when this call failed the deployment. Caller holds mu_.
  bool fail_locked(const Status& reason);
  // Builds the frontend once (the first replica to get here); every replica then shares it.
  Status build_frontend();
  // Request bookkeeping: a batch leaves the queue; a request completes (any thread).
  void on_batch(std::span<const RequestPtr> batch);
  void on_request_done(Request& r, std::string_view status_label);
  Counter& requests_counter(std::string_view status_label);

  const DeploymentConfig config_;
  const std::string modality_;
  const EngineKind kind_;
  MetricsRegistry& registry_;
  std::unique_ptr<RequestQueue> queue_;

  // Metrics series, looked up once (deployment and modality labels).
  Labels labels_;
  Histogram& request_seconds_;
  Histogram& queue_seconds_;
  Histogram& batch_size_;
  Histogram& batch_tokens_;
  Gauge& queue_depth_;
  Gauge& running_gauge_;
  Counter& ok_total_;

  std::atomic<bool> ready_{false};
  std::atomic<bool> aborting_{false};
  std::atomic<int64_t> running_{0};
  std::atomic<uint64_t> next_id_{1};

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable state_cv_;
  DeploymentState state_ = DeploymentState::created;
  int num_loaded_ = 0;
  Status load_error_;
  nlohmann::json engine_info_ = nlohmann::json::object();
  std::vector<std::thread> replicas_;
  std::once_flag frontend_once_;
  Status frontend_status_;  // written once under frontend_once_
  FrontendPtr frontend_;    // written once under frontend_once_; read after ready_
};

}  // namespace prism::serving

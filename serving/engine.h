// serving/engine.h: how engines plug into a deployment. One Engine instance per replica,
// created, loaded, run and destroyed on that replica's thread, so it owns its state without
// locks. Two shapes fit:
//  - encode (embeddings, encoders): implement run_batch; the default serve() pulls batches
//    formed by the deployment's policy and calls it, one batch at a time;
//  - generate (LLM, ASR decoder; continuous batching): override serve() and drive the step
//    loop, pulling new requests between steps with BatchSource::poll.
// Either way every request handed to the engine must be completed (Request::complete)
// before serve() returns; the framework completes forgotten ones with an internal error.
// Engines must not include api/ headers or see HTTP.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "serving/metrics.h"
#include "serving/request.h"

namespace prism::serving {

struct DeploymentConfig;

// The replica's view of its deployment's queue. Replica thread only.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Blocks until the deployment's batch policy sends a batch; empty once the deployment is
  // stopping and nothing waits any more (then the engine finishes its work and returns).
  virtual std::vector<RequestPtr> next_batch() = 0;
  // Never blocks: up to max_requests waiting requests costing at most max_tokens together
  // (at least one if any waits). For engines that admit between steps.
  virtual std::vector<RequestPtr> poll(int max_requests, int64_t max_tokens) = 0;
  // The shutdown grace period ran out: complete running requests now (unavailable) and return.
  virtual bool aborting() const = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Load weights, pack, warm up. Runs on the replica thread before any request; an error
  // marks the deployment failed (not ready) and is reported by Deployment::wait_ready.
  virtual Status load() = 0;
  // Encode pattern: run one batch and complete every request in it. Per-request failures
  // complete that request with its Status; the rest of the batch goes on.
  virtual void run_batch(std::span<const RequestPtr> batch);
  // The replica's loop. Default: next_batch → run_batch until next_batch comes back empty.
  virtual void serve(BatchSource& source);
  // Facts for /v1/models' `prism` object (e.g. embedding_dims, embedding_space_id). Called
  // once on the replica thread after a successful load.
  virtual nlohmann::json describe() const { return nlohmann::json::object(); }
};

// Per-deployment state shared, read-only, by the api's I/O threads and every replica: what a
// route needs before it queues a request (a tokenizer, the model's limits, its embedding
// space). Built once per deployment, before any engine, by the task's FrontendFactory; the
// route downcasts it to the task's type (e.g. engines/encode's EmbedFrontend).
class Frontend {
 public:
  virtual ~Frontend() = default;
};
using FrontendPtr = std::shared_ptr<const Frontend>;
using FrontendFactory = std::function<Result<FrontendPtr>(const DeploymentConfig& config)>;

// What an engine factory is given for one replica.
struct EngineContext {
  const DeploymentConfig& config;  // outlives the engine
  FrontendPtr frontend;            // null when the task has no frontend
  MetricsRegistry& metrics;        // engine series (labelled with `labels`) live here
  const Labels& labels;            // {deployment, modality} of this deployment
  int replica = 0;                 // 0 .. replicas - 1
  int replicas = 1;                // the deployment's replica count: replicas share the cores
};

// Builds one engine per replica (called on the replica thread, before load).
using EngineFactory = std::function<Result<std::unique_ptr<Engine>>(const EngineContext& context)>;

// How a task is served: its engine, and optionally its frontend.
struct EngineKind {
  EngineKind(EngineFactory engine_factory, FrontendFactory frontend_factory = nullptr)  // NOLINT: implicit on purpose
      : engine(std::move(engine_factory)), frontend(std::move(frontend_factory)) {}
  EngineFactory engine;
  FrontendFactory frontend;  // may be null
};

// Engine kinds by task ("embed", "chat", "echo", ...). app/ registers the engines it
// links; serving never names engines/ itself, except its own echo test engine.
class EngineFactories {
 public:
  void add(std::string task, EngineKind kind);
  // not_found naming the task and the tasks that have an engine.
  Result<EngineKind> find(std::string_view task) const;

 private:
  std::vector<std::pair<std::string, EngineKind>> factories_;
};

}  // namespace prism::serving

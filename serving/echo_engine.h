// serving/echo_engine.h: the test engine (task "echo"). It completes each request with its
// own input payload, so tests and the server's overhead benchmark measure the framework
// alone. Knobs: delay_us (sleep per batch, to make batches form), fail_load (load fails).
// A text starting with "error:" completes that request with invalid_argument(rest), the
// rest of the batch going on, to exercise per-request failure.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serving/engine.h"

namespace prism::serving {

struct EchoPayload : Payload {
  explicit EchoPayload(std::string t) : text(std::move(t)) {}
  std::string text;
};

// What the echo engines of a deployment saw, shared by its replicas. Thread-safe.
class EchoStats {
 public:
  void record(std::span<const RequestPtr> batch);
  std::vector<int> batch_sizes() const;
  std::vector<int64_t> batch_tokens() const;       // sum of cost_tokens per batch
  std::vector<uint64_t> request_ids() const;       // in the order engines ran them
  int64_t num_requests() const;

 private:
  mutable std::mutex mu_;
  std::vector<int> sizes_;
  std::vector<int64_t> tokens_;
  std::vector<uint64_t> ids_;
};

class EchoEngine final : public Engine {
 public:
  EchoEngine(const DeploymentConfig& config, std::shared_ptr<EchoStats> stats);
  Status load() override;
  void run_batch(std::span<const RequestPtr> batch) override;
  nlohmann::json describe() const override;

 private:
  const DeploymentConfig& config_;     // not owned; the deployment outlives its engines
  std::shared_ptr<EchoStats> stats_;   // may be null
  int64_t delay_us_ = 0;
};

// A factory for echo engines; all replicas record into `stats` when given.
EngineFactory echo_engine_factory(std::shared_ptr<EchoStats> stats = nullptr);
// Registers task "echo".
void register_echo_engine(EngineFactories& factories, std::shared_ptr<EchoStats> stats = nullptr);

}  // namespace prism::serving

// serving/echo_engine.cpp: the echo test engine.
#include "serving/echo_engine.h"

#include <thread>

#include "serving/config.h"

namespace prism::serving {

void EchoStats::record(std::span<const RequestPtr> batch) {
  int64_t tokens = 0;
  std::lock_guard lock(mu_);
  for (const RequestPtr& r : batch) {
    tokens += r->cost_tokens;
    ids_.push_back(r->id());
  }
  sizes_.push_back(static_cast<int>(batch.size()));
  tokens_.push_back(tokens);
}

std::vector<int> EchoStats::batch_sizes() const {
  std::lock_guard lock(mu_);
  return sizes_;
}

std::vector<int64_t> EchoStats::batch_tokens() const {
  std::lock_guard lock(mu_);
  return tokens_;
}

std::vector<uint64_t> EchoStats::request_ids() const {
  std::lock_guard lock(mu_);
  return ids_;
}

int64_t EchoStats::num_requests() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(ids_.size());
}

EchoEngine::EchoEngine(const DeploymentConfig& config, std::shared_ptr<EchoStats> stats)
    : config_(config), stats_(std::move(stats)) {}

Status EchoEngine::load() {
  PRISM_ASSIGN_OR_RETURN(delay_us_, config_.knobs.get_int("delay_us", 0));
  if (delay_us_ < 0) return invalid_argument("knob 'delay_us' must be >= 0");
  PRISM_ASSIGN_OR_RETURN(bool fail, config_.knobs.get_bool("fail_load", false));
  if (fail) return failed_precondition("echo engine told to fail its load (knob fail_load)");
  return {};
}

void EchoEngine::run_batch(std::span<const RequestPtr> batch) {
  if (stats_) stats_->record(batch);
  if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
  for (const RequestPtr& r : batch) {
    auto* in = dynamic_cast<EchoPayload*>(r->input.get());
    if (in == nullptr) {
      r->complete(invalid_argument("echo engine needs an EchoPayload"));
    } else if (in->text.starts_with("error:")) {
      r->complete(invalid_argument(in->text.substr(6)));
    } else {
      r->complete(std::move(r->input));
    }
  }
}

nlohmann::json EchoEngine::describe() const { return {{"engine", "echo"}, {"delay_us", delay_us_}}; }

EngineFactory echo_engine_factory(std::shared_ptr<EchoStats> stats) {
  return [stats](const EngineContext& context) -> Result<std::unique_ptr<Engine>> {
    return std::unique_ptr<Engine>(std::make_unique<EchoEngine>(context.config, stats));
  };
}

void register_echo_engine(EngineFactories& factories, std::shared_ptr<EchoStats> stats) {
  factories.add("echo", echo_engine_factory(std::move(stats)));
}

}  // namespace prism::serving

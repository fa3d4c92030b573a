// serving/deployment.cpp: replica threads, admission, drain, and the deployment's metrics.
#include "serving/deployment.h"

#include <exception>

#include "base/check.h"
#include "base/log.h"

namespace prism::serving {

std::string_view deployment_state_name(DeploymentState state) {
  switch (state) {
    case DeploymentState::created: return "created";
    case DeploymentState::loading: return "loading";
    case DeploymentState::ready: return "ready";
    case DeploymentState::failed: return "failed";
    case DeploymentState::stopping: return "stopping";
    case DeploymentState::stopped: return "stopped";
  }
  return "unknown";
}

// The replica's window on its deployment's queue: pops batches and does their bookkeeping.
class ReplicaSource final : public BatchSource {
 public:
  explicit ReplicaSource(Deployment& d) : d_(d) {}

  std::vector<RequestPtr> next_batch() override {
    std::vector<RequestPtr> batch = d_.queue_->pop_batch(d_.config_.batching);
    d_.on_batch(batch);
    return batch;
  }

  std::vector<RequestPtr> poll(int max_requests, int64_t max_tokens) override {
    if (max_requests <= 0) return {};
    BatchPolicy p = d_.config_.batching;
    p.max_batch_size = max_requests;
    p.max_batch_tokens = std::max<int64_t>(max_tokens, 1);
    p.preferred_batch_sizes.clear();
    std::vector<RequestPtr> batch = d_.queue_->try_pop_batch(p);
    d_.on_batch(batch);
    return batch;
  }

  bool aborting() const override { return d_.aborting_.load(std::memory_order_relaxed); }

 private:
  Deployment& d_;
};

namespace {

double seconds_since(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration<double>(now - t).count();
}

}  // namespace

Deployment::Deployment(DeploymentConfig config, EngineKind kind, MetricsRegistry& metrics,
                       std::unique_ptr<RequestQueue> queue)
    : config_(std::move(config)),
      modality_(modality_of_task(config_.task)),
      kind_(std::move(kind)),
      registry_(metrics),
      queue_(queue ? std::move(queue) : std::make_unique<InProcessQueue>(config_.batching.queue_capacity)),
      labels_{{"deployment", config_.name}, {"modality", modality_}},
      request_seconds_(metrics.histogram("prism_request_seconds", "Time from submit to completion.",
                                         latency_buckets_seconds(), labels_)),
      queue_seconds_(metrics.histogram("prism_queue_seconds", "Time a request waited in its deployment's queue.",
                                       latency_buckets_seconds(), labels_)),
      batch_size_(metrics.histogram("prism_batch_size", "Requests per batch handed to an engine.",
                                    batch_size_buckets(), labels_)),
      batch_tokens_(metrics.histogram("prism_batch_tokens", "Estimated tokens per batch handed to an engine.",
                                      batch_token_buckets(), labels_)),
      queue_depth_(metrics.gauge("prism_queue_depth", "Requests waiting in the deployment's queue.", labels_)),
      running_gauge_(metrics.gauge("prism_running_requests", "Requests being run by an engine.", labels_)),
      ok_total_(requests_counter("ok")) {}

Deployment::~Deployment() { stop(); }

Counter& Deployment::requests_counter(std::string_view status_label) {
  Labels l = labels_;
  l.emplace_back("status", std::string(status_label));
  return registry_.counter("prism_requests_total", "Requests by final status.", l);
}

void Deployment::start() {
  std::lock_guard lock(mu_);
  if (state_ != DeploymentState::created) return;
  state_ = DeploymentState::loading;
  PRISM_LOG_INFO("deployment {}: loading {} replica(s) of task {} from '{}'", config_.name, config_.replicas,
                 config_.task, config_.model);
  for (int i = 0; i < config_.replicas; ++i) replicas_.emplace_back([this, i] { replica_main(i); });
}

void Deployment::mark_failed(const Status& reason) {
  {
    std::lock_guard lock(mu_);
    if (state_ != DeploymentState::created) return;
    fail_locked(Status(reason.code(), "deployment " + config_.name + ": " + reason.message()));
  }
  queue_->close();
  state_cv_.notify_all();
}

bool Deployment::fail_locked(const Status& reason) {
  if (!load_error_.ok()) return false;
  load_error_ = reason;
  if (state_ == DeploymentState::loading || state_ == DeploymentState::created) state_ = DeploymentState::failed;
  PRISM_LOG_ERROR("deployment {} failed to load: {}", config_.name, load_error_.message());
  return true;
}

Status Deployment::load_error() const {
  std::lock_guard lock(mu_);
  return load_error_;
}

Status Deployment::wait_ready() {
  std::unique_lock lock(mu_);
  if (state_ == DeploymentState::created) return failed_precondition("deployment " + config_.name + " was not started");
  state_cv_.wait(lock, [&] { return state_ != DeploymentState::loading; });
  if (state_ == DeploymentState::failed) return load_error_;
  if (state_ != DeploymentState::ready) return unavailable("deployment " + config_.name + " is stopping");
  return {};
}

void Deployment::replica_main(int index) {
  std::unique_ptr<Engine> engine;
  Status status;
  // Engines should not throw, but a library inside one might: a failed load, not a crash.
  try {
    status = build_frontend();
    if (status.ok()) {
      const EngineContext context{config_, frontend_, registry_, labels_, index, config_.replicas};
      Result<std::unique_ptr<Engine>> made = kind_.engine(context);
      if (made.has_value()) {
        engine = std::move(made).value();
        status = engine->load();
      } else {
        status = made.status();
      }
    }
  } catch (const std::exception& e) {
    status = internal_error(std::string("exception while loading: ") + e.what());
  }
  bool serve = status.ok();
  {
    std::lock_guard lock(mu_);
    if (!status.ok()) {
      const Status reason(status.code(), "deployment " + config_.name + " replica " + std::to_string(index) + ": " +
                                             status.message());
      // One error line per deployment. Another replica failing is a detail of the same failure:
      // at debug when it failed the same way (replicas share the frontend), else a warning.
      if (!fail_locked(reason)) {
        if (load_error_.message().ends_with(": " + status.message()))
          PRISM_LOG_DEBUG("{} (the deployment had already failed)", reason.message());
        else
          PRISM_LOG_WARN("{} (the deployment had already failed)", reason.message());
      }
    } else if (state_ == DeploymentState::failed) {
      serve = false;  // a sibling failed while this one loaded: the deployment is not served
    } else {
      if (num_loaded_++ == 0) engine_info_ = engine->describe();
      if (num_loaded_ == config_.replicas && state_ == DeploymentState::loading) {
        state_ = DeploymentState::ready;
        ready_.store(true, std::memory_order_release);
        PRISM_LOG_INFO("deployment {}: ready", config_.name);
      }
    }
  }
  // A failed deployment never accepted a request (ready_ was never set), so its queue is
  // empty: closing it ends the loops of the replicas already serving, which free their engines.
  if (!status.ok()) queue_->close();
  state_cv_.notify_all();
  if (serve) {
    ReplicaSource source(*this);
    engine->serve(source);
  }
  engine.reset();  // released on the thread that owns it
}

Status Deployment::build_frontend() {
  std::call_once(frontend_once_, [&] {
    if (!kind_.frontend) return;
    Result<FrontendPtr> made = kind_.frontend(config_);
    if (made.has_value()) frontend_ = std::move(made).value();
    else frontend_status_ = made.status();
  });
  return frontend_status_;
}

void Deployment::on_batch(std::span<const RequestPtr> batch) {
  queue_depth_.set(static_cast<double>(queue_->size()));
  if (batch.empty()) return;
  const auto now = Clock::now();
  int64_t tokens = 0;
  for (const RequestPtr& r : batch) {
    r->started_ = true;
    tokens += r->cost_tokens;
    queue_seconds_.observe(seconds_since(r->enqueue_time(), now));
  }
  running_.fetch_add(static_cast<int64_t>(batch.size()), std::memory_order_relaxed);
  running_gauge_.add(static_cast<double>(batch.size()));
  batch_size_.observe(static_cast<double>(batch.size()));
  batch_tokens_.observe(static_cast<double>(tokens));
}

void Deployment::on_request_done(Request& r, std::string_view status_label) {
  request_seconds_.observe(seconds_since(r.enqueue_time(), Clock::now()));
  // ok is by far the most common: its series is cached; other labels are looked up.
  if (status_label == "ok") ok_total_.inc();
  else requests_counter(status_label).inc();
  if (r.started_) {
    running_.fetch_sub(1, std::memory_order_relaxed);
    running_gauge_.add(-1.0);
  }
}

Status Deployment::submit(RequestPtr r) {
  if (!ready()) {
    requests_counter("unavailable").inc();
    DeploymentState s;
    Status load_error;
    {
      std::lock_guard lock(mu_);
      s = state_;
      load_error = load_error_;
    }
    if (s == DeploymentState::failed)
      return unavailable("model '" + config_.name + "' failed to load: " + load_error.message());
    return unavailable("model '" + config_.name + "' is not ready (" + std::string(deployment_state_name(s)) + ")");
  }
  PRISM_CHECK_MSG(r->owner_ == nullptr && !r->completed(), "a request is submitted once");
  const auto now = Clock::now();
  r->enqueued_ = now;
  r->id_ = next_id_.fetch_add(1, std::memory_order_relaxed);
  if (config_.timeout_ms > 0) r->deadline = std::min(r->deadline, now + std::chrono::milliseconds(config_.timeout_ms));
  if (!config_.priority_lanes) r->lane = Lane::online;
  if (r->cost_tokens < 1) r->cost_tokens = 1;
  r->owner_ = this;
  Status s = queue_->push(r);
  if (!s.ok()) {
    r->owner_ = nullptr;  // not ours: its completion is the caller's business
    requests_counter(s.code() == StatusCode::resource_exhausted ? "rejected" : "unavailable").inc();
    return s;
  }
  queue_depth_.set(static_cast<double>(queue_->size()));
  return {};
}

void Deployment::close() {
  {
    std::lock_guard lock(mu_);
    if (state_ == DeploymentState::stopped) return;
    if (state_ != DeploymentState::created) state_ = DeploymentState::stopping;
  }
  ready_.store(false, std::memory_order_release);
  queue_->close();
  state_cv_.notify_all();
}

void Deployment::stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (state_ == DeploymentState::stopped) return;
  }
  close();
  // Drain: replicas keep popping (the closed queue sends at once) until nothing waits or runs.
  const auto start = Clock::now();
  const auto deadline = grace >= std::chrono::hours(24 * 365) ? Clock::time_point::max() : start + grace;
  while ((queue_->size() > 0 || running_.load(std::memory_order_relaxed) > 0) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<RequestPtr> left = queue_->take_all();
  if (!left.empty() || running_.load() > 0) {
    PRISM_LOG_WARN("deployment {}: shutdown grace ran out with {} waiting and {} running requests", config_.name,
                   left.size(), running_.load());
    aborting_.store(true, std::memory_order_relaxed);
  }
  for (RequestPtr& r : left) r->complete_with(unavailable("the server is shutting down"), "unavailable");
  queue_depth_.set(0.0);
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(replicas_);
  }
  for (std::thread& t : threads) t.join();
  {
    std::lock_guard lock(mu_);
    state_ = DeploymentState::stopped;
  }
  state_cv_.notify_all();
  PRISM_LOG_INFO("deployment {}: stopped", config_.name);
}

DeploymentInfo Deployment::info() const {
  DeploymentInfo i;
  i.name = config_.name;
  i.task = config_.task;
  i.modality = modality_;
  i.precision = config_.precision;
  i.model = config_.model;
  i.replicas = config_.replicas;
  i.ready = ready();
  i.queue_depth = queue_->size();
  i.running = running_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  i.state = state_;
  i.error = load_error_.ok() ? std::string() : load_error_.message();
  i.engine = engine_info_;
  return i;
}

}  // namespace prism::serving

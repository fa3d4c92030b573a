// serving/request.h: one unit of work travelling api → queue → replica → engine → api.
// The payload is opaque to serving (engines downcast it); serving only reads the cost,
// lane, deadline and cancellation flag to queue and batch it. The completion callback runs
// exactly once: later complete() calls are ignored, and the framework completes any
// request an engine forgot (internal error) or that was cancelled, expired or drained.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace prism::serving {

using Clock = std::chrono::steady_clock;

// Online requests (a user waiting) are served before bulk ones (batch jobs, backfills).
enum class Lane : uint8_t { online = 0, bulk = 1 };
inline constexpr int kNumLanes = 2;
std::string_view lane_name(Lane lane);

// Base of every request input and result. Engines define their own payload types
// (EchoPayload, an embeddings input, ...) and dynamic_cast to them.
struct Payload {
  virtual ~Payload() = default;
};
using PayloadPtr = std::unique_ptr<Payload>;

// Called exactly once, from whichever thread finishes the request (a replica thread, or the
// thread that calls submit/stop when the request never reaches an engine). It must not
// block: the api posts the result to its connection's executor.
using Completion = std::function<void(Result<PayloadPtr>)>;
// Optional streaming: zero or more partial results before completion (tokens, audio chunks).
using PartialFn = std::function<void(PayloadPtr)>;

class Deployment;

class Request {
 public:
  Request(PayloadPtr input, Completion on_complete);
  ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // ---- set by the api before Deployment::submit; read-only afterwards ----
  PayloadPtr input;                         // moved out by the engine (replica thread) at will
  int64_t cost_tokens = 1;                  // batching cost estimate (tokens), >= 1
  Lane lane = Lane::online;
  Clock::time_point deadline = Clock::time_point::max();  // submit tightens it to the deployment timeout
  std::string request_id;                   // for logs only
  PartialFn on_partial;                     // optional

  // ---- any thread ----
  // The client went away. A queued request is skipped when batches are formed and completes
  // with a cancelled error; an engine that loops (generate) should check cancelled() per step.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  bool completed() const { return done_.load(std::memory_order_acquire); }
  Clock::time_point enqueue_time() const { return enqueued_; }  // valid after submit
  uint64_t id() const { return id_; }                           // assigned by submit

  // ---- the thread that owns the request now (replica thread for engines) ----
  // Delivers the result; true on the first call, false (and no effect) afterwards.
  bool complete(Result<PayloadPtr> result);
  // Streams a partial result; ignored once completed or when there is no on_partial.
  void emit(PayloadPtr chunk);
  // Framework completions: these also pick the metrics status label.
  bool complete_cancelled();
  bool complete_deadline_exceeded();
  bool complete_with(Status status, std::string_view metrics_label);

 private:
  friend class Deployment;
  friend class ReplicaSource;

  std::atomic<bool> cancelled_{false};
  std::atomic<bool> done_{false};
  Completion on_complete_;
  Clock::time_point enqueued_{};
  uint64_t id_ = 0;
  Deployment* owner_ = nullptr;  // not owned; set by submit, outlives the request's completion
  std::atomic<bool> started_{false};  // handed to an engine: counts as running until completed
};
using RequestPtr = std::shared_ptr<Request>;

// Convenience: a request with the given payload and callback, ready for submit.
RequestPtr make_request(PayloadPtr input, Completion on_complete);

}  // namespace prism::serving

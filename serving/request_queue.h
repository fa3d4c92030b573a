// serving/request_queue.h: a deployment's bounded queue of waiting requests. One interface
// (ARCHITECTURE.md "Beyond one machine"): the in-process implementation below is the default;
// a Redis Streams one (consumer groups across machines) can implement the same calls later.
// NOTE: admission is bounded: push never grows the queue past its capacity, it answers
// resource_exhausted (the api's 429 + Retry-After). Cancelled and expired requests are
// removed, and completed, when batches are formed; they never reach an engine.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "serving/batcher.h"
#include "serving/request.h"

namespace prism::serving {

class RequestQueue {
 public:
  virtual ~RequestQueue() = default;
  // Admission. resource_exhausted when full, unavailable once closed. On error the queue did
  // not take the request and will never complete it: the caller answers the client.
  virtual Status push(RequestPtr request) = 0;
  // Blocks until the batcher sends a batch under `policy` and returns it, or returns empty
  // once the queue is closed and holds nothing more.
  virtual std::vector<RequestPtr> pop_batch(const BatchPolicy& policy) = 0;
  // Never blocks: whatever fits `policy` now, ignoring its delay (engines that own their
  // loop admit new requests between steps this way). May be empty.
  virtual std::vector<RequestPtr> try_pop_batch(const BatchPolicy& policy) = 0;
  // Refuse new requests; blocked pop_batch calls drain what is left, then return empty.
  virtual void close() = 0;
  // Removes and returns everything waiting (shutdown past its grace period).
  virtual std::vector<RequestPtr> take_all() = 0;
  virtual size_t size() const = 0;  // waiting requests, both lanes
  virtual bool closed() const = 0;
};

// In-process implementation: two FIFO lanes under one mutex, a condition variable for
// consumers. Consumers (replica threads) call pop_batch concurrently; producers (api
// threads) call push. No lock is held while completing dropped requests.
class InProcessQueue final : public RequestQueue {
 public:
  explicit InProcessQueue(size_t capacity);

  Status push(RequestPtr request) override;
  std::vector<RequestPtr> pop_batch(const BatchPolicy& policy) override;
  std::vector<RequestPtr> try_pop_batch(const BatchPolicy& policy) override;
  void close() override;
  std::vector<RequestPtr> take_all() override;
  size_t size() const override;
  bool closed() const override;

 private:
  // Moves cancelled and expired requests to `dropped`. Caller holds mu_.
  void prune_locked(Clock::time_point now, std::vector<RequestPtr>& dropped);
  // Plans on the head of the lanes and, when the plan sends, moves the batch to `out`.
  BatchPlan plan_locked(const BatchPolicy& policy, Clock::time_point now, bool flush, std::vector<RequestPtr>& out);
  static void finish_dropped(std::vector<RequestPtr>& dropped);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestPtr> lanes_[kNumLanes];  // guarded by mu_
  size_t size_ = 0;                          // guarded by mu_
  bool closed_ = false;                      // guarded by mu_
  std::vector<QueuedView> view_;             // guarded by mu_; reused to avoid allocating per plan
};

}  // namespace prism::serving

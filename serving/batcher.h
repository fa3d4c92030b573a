// serving/batcher.h: the batching decision as a pure function (no clock, no threads, no
// queue): given what waits, the deployment's policy and `now`, take a FIFO prefix now or
// wait N µs for a fuller batch. Triton's dynamic batcher answers "µs to wait, 0 = send now";
// TEI packs under a token budget with a padded or unpadded cost. The queue applies the plan.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "serving/request.h"

namespace prism::serving {

// The per-deployment batching policy ([deployment.batching] in the config).
struct BatchPolicy {
  int max_batch_size = 32;           // requests per batch
  int64_t max_batch_tokens = 16384;  // token budget per batch (see padded_cost)
  // true: a batch costs size × its longest request (engines that pad to a rectangle);
  // false: the sum of costs (engines that run ragged batches with cu_seqlens).
  bool padded_cost = false;
  // Wait up to this long after the oldest request arrived for a fuller batch; 0 = never wait.
  int64_t max_queue_delay_us = 0;
  int queue_capacity = 1024;  // waiting requests; beyond it submit answers resource_exhausted
  // Sizes the engine runs best (e.g. captured graphs); the batcher aims for them: it sends as
  // soon as the largest is reached and, when it sends early, trims to one of them. Sorted.
  std::vector<int> preferred_batch_sizes;
};

// What the batcher sees of one waiting request, in service order (online lane first, FIFO
// within a lane); cancelled and expired requests are already removed.
struct QueuedView {
  int64_t cost_tokens = 1;
  Clock::time_point enqueued;
  Clock::time_point deadline = Clock::time_point::max();
};

inline constexpr int64_t kWaitForPush = -1;  // nothing waits: sleep until a request arrives

struct BatchPlan {
  int size = 0;         // take the first `size` requests now (0: take none)
  int64_t wait_us = 0;  // when size == 0: µs to wait before planning again, or kWaitForPush
};

// NOTE: invariants of the returned plan: size is a prefix length <= the policy's cap
// (largest preferred size, else max_batch_size); the prefix fits max_batch_tokens unless it
// is a single request larger than the budget (sent alone, so it cannot block the queue);
// size == 0 implies wait_us > 0 or kWaitForPush. `flush` (the queue is closed: nothing more
// will come) sends at once. The caller passes at most cap + 1 views: one past the cap is
// enough to tell that the budget, not the queue, ended the batch.
BatchPlan plan_batch(std::span<const QueuedView> waiting, const BatchPolicy& policy, Clock::time_point now,
                     bool flush = false);

// Cost of the first n views under the policy's cost model.
int64_t batch_cost(std::span<const QueuedView> waiting, int n, bool padded_cost);

// The most requests one batch may hold under the policy.
int batch_cap(const BatchPolicy& policy);

}  // namespace prism::serving

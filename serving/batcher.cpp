// serving/batcher.cpp: plan_batch. Pure: everything it knows comes in as arguments.
#include "serving/batcher.h"

#include <algorithm>

namespace prism::serving {

int batch_cap(const BatchPolicy& policy) {
  int cap = policy.max_batch_size;
  if (!policy.preferred_batch_sizes.empty()) cap = std::min(cap, policy.preferred_batch_sizes.back());
  return std::max(cap, 1);
}

int64_t batch_cost(std::span<const QueuedView> waiting, int n, bool padded_cost) {
  int64_t sum = 0, longest = 0;
  for (int i = 0; i < n; ++i) {
    sum += waiting[i].cost_tokens;
    longest = std::max(longest, waiting[i].cost_tokens);
  }
  return padded_cost ? longest * n : sum;
}

namespace {

// The largest preferred size <= n, or n when none is (better something than nothing).
int trim_to_preferred(int n, const std::vector<int>& preferred) {
  int best = 0;
  for (int p : preferred)
    if (p <= n) best = p;
  return best > 0 ? best : n;
}

}  // namespace

BatchPlan plan_batch(std::span<const QueuedView> waiting, const BatchPolicy& policy, Clock::time_point now,
                     bool flush) {
  if (waiting.empty()) return {0, kWaitForPush};

  // Greedy FIFO packing. It stops at the first request that does not fit, never skipping
  // ahead, so a long request cannot starve behind a stream of short ones.
  const int cap = batch_cap(policy);
  const int limit = std::min<int>(cap, waiting.size());
  int n = 1;  // the head always goes, even alone over budget
  int64_t sum = waiting[0].cost_tokens, longest = waiting[0].cost_tokens;
  bool budget_stop = false;
  for (; n < limit; ++n) {
    int64_t c = waiting[n].cost_tokens;
    int64_t cost = policy.padded_cost ? std::max(longest, c) * (n + 1) : sum + c;
    if (cost > policy.max_batch_tokens) {
      budget_stop = true;
      break;
    }
    sum += c;
    longest = std::max(longest, c);
  }
  // A single request over budget: send it alone now (waiting cannot make it fit better).
  if (n == 1 && batch_cost(waiting, 1, policy.padded_cost) > policy.max_batch_tokens) budget_stop = true;
  // Full: the cap or the budget ended the batch, so waiting cannot make it bigger.
  if (n == cap || budget_stop || flush) return {n, 0};

  const bool has_preferred = !policy.preferred_batch_sizes.empty();
  if (policy.max_queue_delay_us <= 0) return {has_preferred ? trim_to_preferred(n, policy.preferred_batch_sizes) : n, 0};

  // Wait for the oldest request's delay to run out, but send before any taken request's
  // deadline would pass while waiting.
  const auto waited_us = std::chrono::duration_cast<std::chrono::microseconds>(now - waiting[0].enqueued).count();
  int64_t wait_us = policy.max_queue_delay_us - waited_us;
  for (int i = 0; i < n; ++i) {
    if (waiting[i].deadline == Clock::time_point::max()) continue;
    auto left_us = std::chrono::duration_cast<std::chrono::microseconds>(waiting[i].deadline - now).count();
    if (left_us <= wait_us) return {n, 0};
  }
  if (wait_us <= 0) return {has_preferred ? trim_to_preferred(n, policy.preferred_batch_sizes) : n, 0};
  return {0, wait_us};
}

}  // namespace prism::serving

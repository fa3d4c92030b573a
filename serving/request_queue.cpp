// serving/request_queue.cpp: the in-process queue. The policy lives in plan_batch; this
// file only applies it, sleeps for the time it asks, and wakes on pushes.
#include "serving/request_queue.h"

#include <algorithm>

namespace prism::serving {

InProcessQueue::InProcessQueue(size_t capacity) : capacity_(capacity) {}

Status InProcessQueue::push(RequestPtr request) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return unavailable("deployment is shutting down");
    if (size_ >= capacity_)
      return resource_exhausted("queue full: " + std::to_string(capacity_) + " requests waiting");
    lanes_[static_cast<int>(request->lane)].push_back(std::move(request));
    ++size_;
  }
  // Wake outside the lock so the woken consumer does not block on it at once.
  cv_.notify_one();
  return {};
}

void InProcessQueue::prune_locked(Clock::time_point now, std::vector<RequestPtr>& dropped) {
  for (auto& lane : lanes_) {
    auto keep = std::stable_partition(lane.begin(), lane.end(), [&](const RequestPtr& r) {
      return !r->cancelled() && r->deadline > now;
    });
    for (auto it = keep; it != lane.end(); ++it) dropped.push_back(std::move(*it));
    size_ -= lane.end() - keep;
    lane.erase(keep, lane.end());
  }
}

void InProcessQueue::finish_dropped(std::vector<RequestPtr>& dropped) {
  for (RequestPtr& r : dropped) {
    if (r->cancelled()) r->complete_cancelled();
    else r->complete_deadline_exceeded();
  }
  dropped.clear();
}

BatchPlan InProcessQueue::plan_locked(const BatchPolicy& policy, Clock::time_point now, bool flush,
                                      std::vector<RequestPtr>& out) {
  // The batcher needs at most cap + 1 requests: the one past the cap only tells whether the
  // budget ended the batch.
  const size_t want = static_cast<size_t>(batch_cap(policy)) + 1;
  view_.clear();
  for (const auto& lane : lanes_)
    for (const RequestPtr& r : lane) {
      if (view_.size() == want) break;
      view_.push_back({r->cost_tokens, r->enqueue_time(), r->deadline});
    }
  BatchPlan plan = plan_batch(view_, policy, now, flush);
  for (int taken = 0; taken < plan.size; ++taken) {
    auto& lane = !lanes_[0].empty() ? lanes_[0] : lanes_[1];
    out.push_back(std::move(lane.front()));
    lane.pop_front();
    --size_;
  }
  return plan;
}

std::vector<RequestPtr> InProcessQueue::pop_batch(const BatchPolicy& policy) {
  std::vector<RequestPtr> batch, dropped;
  std::unique_lock lock(mu_);
  while (true) {
    const auto now = Clock::now();
    prune_locked(now, dropped);
    if (!dropped.empty()) {
      // Completion callbacks run user code: never under our lock. The queue may change
      // meanwhile, so plan again afterwards.
      lock.unlock();
      finish_dropped(dropped);
      lock.lock();
      continue;
    }
    if (closed_ && size_ == 0) return batch;
    BatchPlan plan = plan_locked(policy, now, closed_, batch);
    if (plan.size > 0) return batch;
    if (plan.wait_us == kWaitForPush) cv_.wait(lock);
    else cv_.wait_for(lock, std::chrono::microseconds(plan.wait_us));
  }
}

std::vector<RequestPtr> InProcessQueue::try_pop_batch(const BatchPolicy& policy) {
  std::vector<RequestPtr> batch, dropped;
  {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    prune_locked(now, dropped);
    plan_locked(policy, now, /*flush=*/true, batch);
  }
  finish_dropped(dropped);
  return batch;
}

void InProcessQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

std::vector<RequestPtr> InProcessQueue::take_all() {
  std::vector<RequestPtr> out;
  std::lock_guard lock(mu_);
  for (auto& lane : lanes_) {
    for (RequestPtr& r : lane) out.push_back(std::move(r));
    lane.clear();
  }
  size_ = 0;
  return out;
}

size_t InProcessQueue::size() const {
  std::lock_guard lock(mu_);
  return size_;
}

bool InProcessQueue::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

}  // namespace prism::serving

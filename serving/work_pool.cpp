// serving/work_pool.cpp: the bounded worker pool.
#include "serving/work_pool.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "base/log.h"

namespace prism::serving {

WorkPool::WorkPool(std::string name, int num_threads, size_t max_queued, std::function<void()> on_thread_start)
    : name_(std::move(name)), max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, num_threads); ++i)
    threads_.emplace_back([this, on_thread_start] { work(on_thread_start); });
}

WorkPool::~WorkPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool WorkPool::try_post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(job));
  }
  ready_.notify_one();
  return true;
}

void WorkPool::work(const std::function<void()>& on_thread_start) {
  if (on_thread_start) on_thread_start();
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every queued job has run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // NOTE: a job answers its own errors; one that throws anyway must not end the worker.
    try {
      job();
    } catch (const std::exception& e) {
      PRISM_LOG_ERROR("work pool {}: a job threw: {}", name_, e.what());
    } catch (...) {
      PRISM_LOG_ERROR("work pool {}: a job threw", name_);
    }
  }
}

}  // namespace prism::serving

// serving/work_pool.h: a bounded pool of worker threads for blocking work that must not run on
// the HTTP I/O threads: fetching and decoding a request's media today, the pipelines' jobs
// next. A fixed set of threads takes jobs first come, first served from a queue of bounded
// depth; when the queue is full try_post refuses at once and the caller answers 429 (the
// server is busy), never blocks. It must not run model compute (that is a deployment's, on the
// compute pool), and a job must not wait on another job of the same pool.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace prism::serving {

class WorkPool {
 public:
  // num_threads >= 1 workers, at most max_queued jobs waiting. on_thread_start runs first on
  // each worker (the app sets the thread's OpenMP team to one there: runtime/threads.h).
  WorkPool(std::string name, int num_threads, size_t max_queued, std::function<void()> on_thread_start = {});
  // Stops taking jobs, runs those already queued, joins the workers.
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues job; false (and job dropped unrun) when the queue is full or the pool is stopping.
  bool try_post(std::function<void()> job);
  const std::string& name() const { return name_; }
  size_t max_queued() const { return max_queued_; }

 private:
  void work(const std::function<void()>& on_thread_start);

  const std::string name_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace prism::serving

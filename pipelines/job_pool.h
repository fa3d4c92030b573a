// pipelines/job_pool.h: the bounded pool of jobs: work that outlives the request that started
// it or spans several deployments (long-form transcription today; video generation, bulk
// embedding and the voice and document pipelines next). A job is a record (id, state,
// progress, where its result is, why it failed) plus a body that runs on one of the pool's
// workers. The body does the blocking part (decoding an upload, waiting on a VAD deployment,
// computing features) and hands the rest to deployments through their queues; the job ends
// when something calls Job::finish — the body itself, or, after Job::finish_later, a
// deployment's completion. So a worker is held only while a job prepares, never while its
// requests wait on an engine.
// The queue is bounded: submit refuses at once when it is full (the api answers 429 with
// Retry-After), it never blocks. Finished records are kept (the newest max_records) so a
// client can still read them.
// Series (label pool): prism_jobs_queued, prism_jobs_running (gauges), prism_jobs_total{state}
// (counter, per final state), prism_job_seconds (histogram, submit → finish).
// Must not: run model compute on a worker (that is a deployment's), or wait on another job of
// the same pool.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "serving/metrics.h"
#include "serving/request.h"
#include "serving/work_pool.h"

namespace prism::pipelines {

enum class JobState : uint8_t { queued, running, succeeded, failed, cancelled };
std::string_view job_state_name(JobState state);

// What a job is at one moment (a copy: reading it takes no lock of the job's later).
struct JobRecord {
  std::string id;    // unique in the process: "<pool>-<n>"
  std::string kind;  // what it does, e.g. "transcription"
  JobState state = JobState::queued;
  int64_t done = 0, total = 0;  // progress, in the job's own units (a transcription's chunks)
  std::string result;           // where the result is, once succeeded ("" when it went back to the caller)
  Status error;                 // failed or cancelled: why
  serving::Clock::time_point submitted, started, finished;
};

class JobPool;

// A job's handle: its body gets it, and whatever finishes the job later keeps it.
class Job {
 public:
  const std::string& id() const { return id_; }
  JobRecord record() const;
  bool cancelled() const { return cancel_requested_.load(std::memory_order_acquire); }
  // Progress in the job's units; any thread.
  void set_progress(int64_t done, int64_t total);
  // What cancelling does (stop the job's requests); runs at once if the job is already being
  // cancelled. Set once, by the body.
  void on_cancel(std::function<void()> fn);
  // The body returns before the job ends: something it set up will call finish().
  void finish_later();
  // Ends the job, once (later calls are ignored): ok → succeeded with `result`; a cancelled
  // status → cancelled; any other → failed.
  void finish(Status status, std::string result = {});

  struct PoolState;  // what a job reports its end to (it may outlive the pool)
  Job(std::weak_ptr<PoolState> pool, std::string id, std::string kind);

 private:
  friend class JobPool;
  void cancel();  // JobPool::cancel

  const std::weak_ptr<PoolState> pool_;
  const std::string id_;
  std::atomic<bool> cancel_requested_{false};
  mutable std::mutex mu_;  // guards what follows
  JobRecord record_;
  bool finish_later_ = false;
  std::function<void()> on_cancel_;
};

struct JobPoolOptions {
  std::string name = "jobs";
  int workers = 4;         // jobs preparing at once
  size_t max_queued = 4;   // jobs waiting for a worker; beyond it submit refuses
  size_t max_records = 1024;  // finished records kept for record()
  std::function<void()> on_thread_start;  // each worker's first call (the app: an OpenMP team of one)
};

class JobPool {
 public:
  // metrics: optional, outlives the pool.
  explicit JobPool(JobPoolOptions options, serving::MetricsRegistry* metrics = nullptr);
  // Runs the bodies already queued and joins the workers. Jobs still waiting on deployments
  // finish later all the same (their records are then no one's).
  ~JobPool();
  JobPool(const JobPool&) = delete;
  JobPool& operator=(const JobPool&) = delete;

  using Body = std::function<Status(const std::shared_ptr<Job>& job)>;
  // Queues a job: `body` runs on a worker; the job ends when it returns (its Status), unless it
  // called finish_later() (then finish() ends it) or finish() itself. A job cancelled while
  // queued never runs its body. resource_exhausted when the queue is full or the pool stopping.
  Result<std::shared_ptr<Job>> submit(std::string kind, Body body);
  // The job's record; not_found for an id the pool does not know (or no longer keeps).
  Result<JobRecord> record(std::string_view id) const;
  // Asks the job to stop: a queued one ends cancelled at once, a running one runs its on_cancel.
  // not_found as record(); a finished job is left as it is.
  Status cancel(std::string_view id);

  const JobPoolOptions& options() const { return options_; }

 private:
  void run(const std::shared_ptr<Job>& job, const Body& body);

  const JobPoolOptions options_;
  std::atomic<uint64_t> next_id_{1};
  std::shared_ptr<Job::PoolState> state_;  // records and series
  serving::WorkPool workers_;  // last: its destructor runs queued bodies, which use the above
};

}  // namespace prism::pipelines

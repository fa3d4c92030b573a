// The job pool: records in a map under one lock (Job::PoolState, shared with the jobs, which
// may finish after the pool is gone), bodies on a serving::WorkPool. A job's own state is
// under its own lock, and nothing is called with either lock held (a cancel hook or the
// pool's bookkeeping may take the other).
#include "pipelines/job_pool.h"

#include <deque>
#include <exception>
#include <map>
#include <utility>

namespace prism::pipelines {

std::string_view job_state_name(JobState state) {
  switch (state) {
    case JobState::queued: return "queued";
    case JobState::running: return "running";
    case JobState::succeeded: return "succeeded";
    case JobState::failed: return "failed";
    case JobState::cancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

bool finished(JobState s) { return s == JobState::succeeded || s == JobState::failed || s == JobState::cancelled; }

}  // namespace

// ---- the pool's records and series ----

struct Job::PoolState {
  PoolState(const JobPoolOptions& options, serving::MetricsRegistry* m) : max_records(options.max_records), registry(m) {
    if (!m) return;
    labels = {{"pool", options.name}};
    queued = &m->gauge("prism_jobs_queued", "Jobs waiting for a worker of the pool", labels);
    running = &m->gauge("prism_jobs_running", "Jobs started and not finished (preparing, or waiting on deployments)",
                        labels);
    seconds = &m->histogram("prism_job_seconds", "A job's life, submit to finish", serving::latency_buckets_seconds(),
                            labels);
  }
  void add_queued(double v) {
    if (queued) queued->add(v);
  }
  void add_running(double v) {
    if (running) running->add(v);
  }
  // From Job::finish, once per job.
  void on_finished(const JobRecord& record) {
    if (registry) {
      if (record.started != serving::Clock::time_point()) running->add(-1);
      serving::Labels l = labels;
      l.emplace_back("state", std::string(job_state_name(record.state)));
      registry->counter("prism_jobs_total", "Jobs finished, by final state", l).inc();
      seconds->observe(std::chrono::duration<double>(record.finished - record.submitted).count());
    }
    std::lock_guard lock(mu);
    finished.push_back(record.id);
    while (finished.size() > max_records) {
      jobs.erase(finished.front());
      finished.pop_front();
    }
  }

  const size_t max_records;
  serving::MetricsRegistry* const registry;  // null: no series
  serving::Labels labels;
  serving::Gauge* queued = nullptr;
  serving::Gauge* running = nullptr;
  serving::Histogram* seconds = nullptr;
  std::mutex mu;  // guards jobs and finished
  std::map<std::string, std::shared_ptr<Job>, std::less<>> jobs;
  std::deque<std::string> finished;  // ids of finished jobs, oldest first
};

// ---- Job ----

Job::Job(std::weak_ptr<PoolState> pool, std::string id, std::string kind) : pool_(std::move(pool)), id_(std::move(id)) {
  record_.id = id_;
  record_.kind = std::move(kind);
  record_.submitted = serving::Clock::now();
}

JobRecord Job::record() const {
  std::lock_guard lock(mu_);
  return record_;
}

void Job::set_progress(int64_t done, int64_t total) {
  std::lock_guard lock(mu_);
  record_.done = done;
  record_.total = total;
}

void Job::on_cancel(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (!cancelled() || finished(record_.state)) {
      on_cancel_ = std::move(fn);
      return;
    }
  }
  fn();  // cancelled before the hook was set
}

void Job::finish_later() {
  std::lock_guard lock(mu_);
  finish_later_ = true;
}

void Job::finish(Status status, std::string result) {
  JobRecord done;
  {
    std::lock_guard lock(mu_);
    if (finished(record_.state)) return;
    record_.state = status.ok() ? JobState::succeeded
                    : status.code() == StatusCode::cancelled ? JobState::cancelled
                                                             : JobState::failed;
    record_.error = std::move(status);
    record_.result = std::move(result);
    record_.finished = serving::Clock::now();
    on_cancel_ = nullptr;  // it may hold what holds this job
    done = record_;
  }
  if (std::shared_ptr<PoolState> pool = pool_.lock()) pool->on_finished(done);
}

void Job::cancel() {
  std::function<void()> hook;
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    cancel_requested_.store(true, std::memory_order_release);
    if (finished(record_.state)) return;
    queued = record_.state == JobState::queued;
    hook = on_cancel_;
  }
  if (queued) finish(cancelled_error("the job was cancelled before it started"));
  else if (hook) hook();
}

// ---- JobPool ----

JobPool::JobPool(JobPoolOptions options, serving::MetricsRegistry* metrics)
    : options_(std::move(options)),
      state_(std::make_shared<Job::PoolState>(options_, metrics)),
      workers_(options_.name, options_.workers, options_.max_queued, options_.on_thread_start) {}

JobPool::~JobPool() = default;

Result<std::shared_ptr<Job>> JobPool::submit(std::string kind, Body body) {
  const std::string id = options_.name + "-" + std::to_string(next_id_.fetch_add(1));
  auto job = std::make_shared<Job>(state_, id, std::move(kind));
  {
    std::lock_guard lock(state_->mu);
    state_->jobs.emplace(id, job);
  }
  state_->add_queued(1);
  if (!workers_.try_post([this, job, body = std::move(body)] { run(job, body); })) {
    state_->add_queued(-1);
    std::lock_guard lock(state_->mu);
    state_->jobs.erase(id);
    return resource_exhausted("the " + options_.name + " pool is full: " + std::to_string(options_.max_queued) +
                              " jobs wait for its " + std::to_string(options_.workers) + " workers");
  }
  return job;
}

void JobPool::run(const std::shared_ptr<Job>& job, const Body& body) {
  state_->add_queued(-1);
  {
    std::lock_guard lock(job->mu_);
    if (job->record_.state != JobState::queued) return;  // cancelled while it waited
    job->record_.state = JobState::running;
    job->record_.started = serving::Clock::now();
  }
  state_->add_running(1);
  Status status;
  try {
    status = body(job);
  } catch (const std::exception& e) {
    status = internal_error(std::string("the job's body threw: ") + e.what());
  }
  bool later = false;
  {
    std::lock_guard lock(job->mu_);
    later = job->finish_later_;
  }
  if (!later || !status.ok()) job->finish(std::move(status));
}

Result<JobRecord> JobPool::record(std::string_view id) const {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->jobs.find(id);
    if (it == state_->jobs.end()) return not_found("no job '" + std::string(id) + "'");
    job = it->second;
  }
  return job->record();
}

Status JobPool::cancel(std::string_view id) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->jobs.find(id);
    if (it == state_->jobs.end()) return not_found("no job '" + std::string(id) + "'");
    job = it->second;
  }
  job->cancel();
  return Status();
}

}  // namespace prism::pipelines

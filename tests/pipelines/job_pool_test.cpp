// The job pool (pipelines/job_pool.h): records through a job's life (queued, running,
// progress, succeeded / failed / cancelled), a body that hands its job on (finish_later),
// cancellation while queued and while running, a full queue refused at once, records kept up
// to max_records, and the prism_jobs_* series.
#include "pipelines/job_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace prism::pipelines {
namespace {

using ::testing::HasSubstr;

// A latch the test opens; bodies wait on it.
class Latch {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

JobRecord wait_finished(const JobPool& pool, const std::string& id) {
  for (int i = 0; i < 5000; ++i) {
    Result<JobRecord> r = pool.record(id);
    if (r.has_value() && r->state != JobState::queued && r->state != JobState::running) return *r;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "job " << id << " never finished";
  return {};
}

TEST(JobPool, ABodysStatusEndsItsJob) {
  serving::MetricsRegistry metrics;
  JobPool pool({.name = "t", .workers = 2, .max_queued = 8}, &metrics);
  Result<std::shared_ptr<Job>> ok = pool.submit("work", [](const std::shared_ptr<Job>& job) {
    job->set_progress(3, 3);
    return Status();
  });
  Result<std::shared_ptr<Job>> bad = pool.submit("work", [](const std::shared_ptr<Job>&) {
    return invalid_argument("the input is bad");
  });
  ASSERT_TRUE(ok.has_value() && bad.has_value());
  EXPECT_NE((*ok)->id(), (*bad)->id());
  EXPECT_EQ((*ok)->id().rfind("t-", 0), 0u);

  const JobRecord a = wait_finished(pool, (*ok)->id());
  EXPECT_EQ(a.state, JobState::succeeded);
  EXPECT_EQ(a.kind, "work");
  EXPECT_EQ(a.done, 3);
  EXPECT_EQ(a.total, 3);
  EXPECT_TRUE(a.error.ok());
  EXPECT_LE(a.submitted, a.started);
  EXPECT_LE(a.started, a.finished);
  const JobRecord b = wait_finished(pool, (*bad)->id());
  EXPECT_EQ(b.state, JobState::failed);
  EXPECT_EQ(b.error.code(), StatusCode::invalid_argument);

  const std::string text = metrics.render();
  EXPECT_THAT(text, HasSubstr("prism_jobs_total{pool=\"t\",state=\"succeeded\"} 1"));
  EXPECT_THAT(text, HasSubstr("prism_jobs_total{pool=\"t\",state=\"failed\"} 1"));
  EXPECT_THAT(text, HasSubstr("prism_jobs_running{pool=\"t\"} 0"));
  EXPECT_THAT(text, HasSubstr("prism_jobs_queued{pool=\"t\"} 0"));
  EXPECT_THAT(text, HasSubstr("prism_job_seconds_count{pool=\"t\"} 2"));
  EXPECT_EQ(pool.record("t-999").status().code(), StatusCode::not_found);
}

TEST(JobPool, AJobHandedOnEndsWhenFinishedAndFreesItsWorker) {
  JobPool pool({.name = "t", .workers = 1, .max_queued = 8});
  std::shared_ptr<Job> held;
  Result<std::shared_ptr<Job>> later = pool.submit("async", [&](const std::shared_ptr<Job>& job) {
    job->finish_later();
    held = job;  // e.g. a deployment's completion finishes it
    return Status();
  });
  ASSERT_TRUE(later.has_value());
  // The one worker is free again: the next job runs while the first is still running.
  Result<std::shared_ptr<Job>> next = pool.submit("sync", [](const std::shared_ptr<Job>&) { return Status(); });
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(wait_finished(pool, (*next)->id()).state, JobState::succeeded);
  EXPECT_EQ(pool.record((*later)->id())->state, JobState::running);
  held->finish(Status(), "/results/1.json");
  held->finish(internal_error("ignored: a job ends once"));
  const JobRecord r = *pool.record((*later)->id());
  EXPECT_EQ(r.state, JobState::succeeded);
  EXPECT_EQ(r.result, "/results/1.json");
}

TEST(JobPool, CancellingAQueuedJobSkipsItsBodyAndARunningOneRunsItsHook) {
  serving::MetricsRegistry metrics;
  JobPool pool({.name = "t", .workers = 1, .max_queued = 8}, &metrics);
  Latch gate, entered;
  std::promise<void> hook_ran;
  Result<std::shared_ptr<Job>> running = pool.submit("slow", [&](const std::shared_ptr<Job>& job) {
    job->on_cancel([&] { hook_ran.set_value(); });
    job->finish_later();  // the hook's owner will finish it
    entered.open();
    gate.wait();
    return Status();
  });
  bool body_ran = false;
  Result<std::shared_ptr<Job>> queued = pool.submit("never", [&](const std::shared_ptr<Job>&) {
    body_ran = true;
    return Status();
  });
  ASSERT_TRUE(running.has_value() && queued.has_value());
  entered.wait();
  EXPECT_EQ(pool.record((*queued)->id())->state, JobState::queued);
  ASSERT_TRUE(pool.cancel((*queued)->id()).ok());
  EXPECT_EQ(pool.record((*queued)->id())->state, JobState::cancelled);
  ASSERT_TRUE(pool.cancel((*running)->id()).ok());
  hook_ran.get_future().wait();
  EXPECT_TRUE((*running)->cancelled());
  (*running)->finish(cancelled_error("stopped by its hook"));
  gate.open();
  EXPECT_EQ(wait_finished(pool, (*running)->id()).state, JobState::cancelled);
  EXPECT_EQ(pool.cancel("t-999").code(), StatusCode::not_found);
  EXPECT_TRUE(pool.cancel((*queued)->id()).ok());  // already finished: left as it is
  EXPECT_FALSE(body_ran);
  EXPECT_THAT(metrics.render(), HasSubstr("prism_jobs_total{pool=\"t\",state=\"cancelled\"} 2"));
}

TEST(JobPool, AFullQueueIsRefusedAtOnce) {
  JobPool pool({.name = "t", .workers = 1, .max_queued = 2});
  Latch gate, entered;
  ASSERT_TRUE(pool.submit("busy", [&](const std::shared_ptr<Job>&) {
                    entered.open();
                    gate.wait();
                    return Status();
                  })
                  .has_value());
  entered.wait();
  ASSERT_TRUE(pool.submit("a", [](const std::shared_ptr<Job>&) { return Status(); }).has_value());
  ASSERT_TRUE(pool.submit("b", [](const std::shared_ptr<Job>&) { return Status(); }).has_value());
  Result<std::shared_ptr<Job>> refused = pool.submit("c", [](const std::shared_ptr<Job>&) { return Status(); });
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.status().code(), StatusCode::resource_exhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("2 jobs wait"));
  gate.open();
}

TEST(JobPool, KeepsTheNewestFinishedRecords) {
  JobPool pool({.name = "t", .workers = 1, .max_queued = 16, .max_records = 3});
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    Result<std::shared_ptr<Job>> j = pool.submit("n", [](const std::shared_ptr<Job>&) { return Status(); });
    ASSERT_TRUE(j.has_value());
    ids.push_back((*j)->id());
    wait_finished(pool, ids.back());
  }
  EXPECT_EQ(pool.record(ids[0]).status().code(), StatusCode::not_found);
  EXPECT_EQ(pool.record(ids[1]).status().code(), StatusCode::not_found);
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(pool.record(ids[size_t(i)]).has_value()) << i;
}

TEST(JobPool, AJobFinishedAfterItsPoolIsGoneIsHarmless) {
  std::shared_ptr<Job> held;
  {
    JobPool pool({.name = "t", .workers = 1, .max_queued = 2});
    ASSERT_TRUE(pool.submit("async", [&](const std::shared_ptr<Job>& job) {
                      job->finish_later();
                      held = job;
                      return Status();
                    })
                    .has_value());
  }  // runs the queued body, joins
  ASSERT_TRUE(held);
  held->finish(Status());
  EXPECT_EQ(held->record().state, JobState::succeeded);
}

}  // namespace
}  // namespace prism::pipelines

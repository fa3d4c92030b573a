// serving::WorkPool: every posted job runs, in order on one worker; a full queue refuses
// without blocking; the destructor runs what was queued; each worker runs the start hook first.
// Synchronised by latches and counts, never by time.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <latch>
#include <mutex>
#include <vector>

#include "serving/work_pool.h"

namespace prism::serving {
namespace {

TEST(WorkPool, RunsEveryJobInOrderOnOneWorker) {
  std::vector<int> order;
  std::mutex mu;
  {
    WorkPool pool("test", 1, 100);
    for (int i = 0; i < 50; ++i)
      ASSERT_TRUE(pool.try_post([&, i] {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }));
  }  // the destructor runs what is queued
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[size_t(i)], i);
}

TEST(WorkPool, AFullQueueRefusesAtOnce) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::latch started(1);
  std::atomic<int> ran{0};
  {
    WorkPool pool("test", 1, 2);
    ASSERT_TRUE(pool.try_post([&] {
      started.count_down();
      released.wait();  // holds the only worker
      ++ran;
    }));
    started.wait();
    EXPECT_TRUE(pool.try_post([&] { ++ran; }));
    EXPECT_TRUE(pool.try_post([&] { ++ran; }));
    EXPECT_FALSE(pool.try_post([&] { ++ran; }));  // two queued: full
    EXPECT_EQ(pool.max_queued(), 2u);
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 3);
}

TEST(WorkPool, EachWorkerRunsTheStartHookAndAThrowingJobDoesNotEndIt) {
  std::atomic<int> hooks{0}, ran{0};
  {
    WorkPool pool("test", 3, 10, [&] { ++hooks; });
    ASSERT_TRUE(pool.try_post([] { throw std::runtime_error("boom"); }));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.try_post([&] { ++ran; }));
  }
  EXPECT_EQ(hooks.load(), 3);
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace prism::serving

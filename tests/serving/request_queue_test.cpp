// InProcessQueue alone: admission bound, lanes, skipping cancelled and expired requests,
// closing. Requests here are not submitted through a Deployment (no metrics owner).
#include "serving/request_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "serving/echo_engine.h"

namespace prism::serving {
namespace {

struct Done {
  int calls = 0;
  Status status;
};

RequestPtr make(const std::string& text, Done* done, Lane lane = Lane::online) {
  RequestPtr r = make_request(std::make_unique<EchoPayload>(text), [done](Result<PayloadPtr> res) {
    if (done == nullptr) return;
    ++done->calls;
    done->status = res.status();
  });
  r->lane = lane;
  return r;
}

std::string text_of(const RequestPtr& r) { return dynamic_cast<EchoPayload&>(*r->input).text; }

std::vector<std::string> texts(const std::vector<RequestPtr>& batch) {
  std::vector<std::string> out;
  for (const RequestPtr& r : batch) out.push_back(text_of(r));
  return out;
}

BatchPolicy one_at_a_time() {
  BatchPolicy p;
  p.max_batch_size = 1;
  return p;
}

TEST(RequestQueue, FullQueueRejects) {
  InProcessQueue q(2);
  EXPECT_TRUE(q.push(make("a", nullptr)).ok());
  EXPECT_TRUE(q.push(make("b", nullptr)).ok());
  Status s = q.push(make("c", nullptr));
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(texts(q.pop_batch(one_at_a_time())), std::vector<std::string>{"a"});
  EXPECT_TRUE(q.push(make("c", nullptr)).ok());  // room again
  EXPECT_EQ(q.size(), 2u);
}

TEST(RequestQueue, OnlineBeforeBulk) {
  InProcessQueue q(16);
  ASSERT_TRUE(q.push(make("b1", nullptr, Lane::bulk)).ok());
  ASSERT_TRUE(q.push(make("b2", nullptr, Lane::bulk)).ok());
  ASSERT_TRUE(q.push(make("o1", nullptr, Lane::online)).ok());
  ASSERT_TRUE(q.push(make("o2", nullptr, Lane::online)).ok());
  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i)
    for (auto& t : texts(q.pop_batch(one_at_a_time()))) order.push_back(t);
  EXPECT_EQ(order, (std::vector<std::string>{"o1", "o2", "b1", "b2"}));

  // A batch spans the lanes in the same order.
  ASSERT_TRUE(q.push(make("b3", nullptr, Lane::bulk)).ok());
  ASSERT_TRUE(q.push(make("o3", nullptr, Lane::online)).ok());
  EXPECT_EQ(texts(q.pop_batch(BatchPolicy{})), (std::vector<std::string>{"o3", "b3"}));
}

TEST(RequestQueue, CancelledAndExpiredAreSkippedAndCompleted) {
  InProcessQueue q(16);
  Done a, b, c, d;
  RequestPtr ra = make("a", &a), rb = make("b", &b), rc = make("c", &c), rd = make("d", &d);
  rd->deadline = Clock::now() - std::chrono::milliseconds(1);
  for (auto& r : {ra, rb, rc, rd}) ASSERT_TRUE(q.push(r).ok());
  rb->cancel();
  EXPECT_EQ(texts(q.pop_batch(BatchPolicy{})), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(a.calls, 0);  // handed out, not completed: that is the engine's job
  EXPECT_EQ(b.calls, 1);
  EXPECT_TRUE(b.status.code() == StatusCode::cancelled) << b.status.to_string();
  EXPECT_EQ(d.calls, 1);
  EXPECT_TRUE(d.status.code() == StatusCode::deadline_exceeded) << d.status.to_string();
  EXPECT_FALSE(d.status.code() == StatusCode::cancelled);
  EXPECT_EQ(q.size(), 0u);
}

TEST(RequestQueue, TryPopRespectsLimitsAndNeverBlocks) {
  InProcessQueue q(16);
  EXPECT_TRUE(q.try_pop_batch(BatchPolicy{}).empty());
  for (int i = 0; i < 5; ++i) {
    RequestPtr r = make(std::to_string(i), nullptr);
    r->cost_tokens = 4;
    ASSERT_TRUE(q.push(r).ok());
  }
  BatchPolicy p;
  p.max_batch_size = 10;
  p.max_batch_tokens = 9;
  p.max_queue_delay_us = 60'000'000;  // ignored by try_pop
  EXPECT_EQ(texts(q.try_pop_batch(p)), (std::vector<std::string>{"0", "1"}));
  p.max_batch_size = 1;
  EXPECT_EQ(texts(q.try_pop_batch(p)), (std::vector<std::string>{"2"}));
  EXPECT_EQ(q.size(), 2u);
}

TEST(RequestQueue, CloseDrainsThenReturnsEmpty) {
  InProcessQueue q(16);
  ASSERT_TRUE(q.push(make("a", nullptr)).ok());
  ASSERT_TRUE(q.push(make("b", nullptr)).ok());
  q.close();
  EXPECT_EQ(q.push(make("c", nullptr)).code(), StatusCode::unavailable);
  BatchPolicy slow;
  slow.max_queue_delay_us = 60'000'000;  // a closed queue sends at once anyway
  EXPECT_EQ(texts(q.pop_batch(slow)), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(q.pop_batch(slow).empty());
}

TEST(RequestQueue, BlockedConsumerWakesOnPushAndClose) {
  InProcessQueue q(16);
  std::vector<std::string> got;
  bool ended = false;
  std::thread consumer([&] {
    while (true) {
      auto batch = q.pop_batch(BatchPolicy{});
      if (batch.empty()) break;
      for (auto& t : texts(batch)) got.push_back(t);
    }
    ended = true;
  });
  ASSERT_TRUE(q.push(make("x", nullptr)).ok());
  ASSERT_TRUE(q.push(make("y", nullptr)).ok());
  q.close();
  consumer.join();
  EXPECT_TRUE(ended);
  EXPECT_EQ(got, (std::vector<std::string>{"x", "y"}));
}

TEST(RequestQueue, TakeAll) {
  InProcessQueue q(16);
  ASSERT_TRUE(q.push(make("a", nullptr, Lane::bulk)).ok());
  ASSERT_TRUE(q.push(make("b", nullptr)).ok());
  EXPECT_EQ(texts(q.take_all()), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(q.size(), 0u);
}

}  // namespace
}  // namespace prism::serving

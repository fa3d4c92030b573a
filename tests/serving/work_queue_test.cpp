// The WorkQueue contract (serving/work_queue.h), run against both implementations: the
// in-process queue (with a fake clock) and the Redis one (a throwaway redis-server on
// loopback; skipped, saying so, when redis-server is not installed).
#include "serving/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "serving/in_process_work_queue.h"
#include "serving/redis_work_queue.h"
#include "test_util/redis_server.h"

namespace prism::serving {
namespace {

// One implementation under test: how to open the queue (again, as another process would) and
// how to let time pass for idle times.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<WorkQueue> open() = 0;  // another handle on the same queue
  virtual void age(int64_t ms) = 0;
};

class InProcessBackend final : public Backend {
 public:
  std::unique_ptr<WorkQueue> open() override {
    // Handles share one queue, as connections to one Redis share one stream.
    struct Handle final : WorkQueue {
      InProcessWorkQueue* q;
      explicit Handle(InProcessWorkQueue* q) : q(q) {}
      Status add(std::span<const WorkItem> items, int64_t expected) override { return q->add(items, expected); }
      Status close() override { return q->close(); }
      Result<std::vector<ClaimedItem>> claim(const std::string& c, const ClaimOptions& o) override {
        return q->claim(c, o);
      }
      Result<int64_t> complete(const std::string& c, std::span<const ClaimedItem> items,
                               std::span<const std::string> results) override {
        return q->complete(c, items, results);
      }
      Result<WorkProgress> progress() override { return q->progress(); }
      Result<std::vector<std::optional<std::string>>> results(std::span<const std::string> keys) override {
        return q->results(keys);
      }
      Result<std::string> set_attribute_once(const std::string& n, const std::string& v) override {
        return q->set_attribute_once(n, v);
      }
      Result<std::optional<std::string>> attribute(const std::string& n) override { return q->attribute(n); }
    };
    return std::make_unique<Handle>(&queue_);
  }
  void age(int64_t ms) override { now_ms_ += ms; }

 private:
  std::atomic<int64_t> now_ms_{1000};
  InProcessWorkQueue queue_{[this] { return now_ms_.load(); }};
};

class RedisBackend final : public Backend {
 public:
  RedisBackend(test::RedisServer* server, std::string name) : server_(server), name_(std::move(name)) {}
  std::unique_ptr<WorkQueue> open() override {
    auto ep = parse_redis_endpoint(server_->address());
    EXPECT_TRUE(ep.has_value());
    auto q = RedisWorkQueue::open(*ep, name_);
    EXPECT_TRUE(q.has_value()) << q.status().to_string();
    return q ? std::move(*q) : nullptr;
  }
  // Redis measures idle time with its own clock: really wait.
  void age(int64_t ms) override { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

 private:
  test::RedisServer* server_;
  std::string name_;
};

// One server for the whole file; nullptr (with why) when it cannot start.
test::RedisServer* shared_redis(std::string* why) {
  static std::unique_ptr<test::RedisServer> server;
  static Status status = [] {
    auto s = test::RedisServer::start("work_queue_test");
    if (!s) return s.status();
    server = std::move(*s);
    return Status();
  }();
  *why = status.message();
  return status.ok() ? server.get() : nullptr;
}

class WorkQueueTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "in_process") {
      backend_ = std::make_unique<InProcessBackend>();
    } else {
      std::string why;
      test::RedisServer* server = shared_redis(&why);
      if (!server) GTEST_SKIP() << "no redis-server to test against: " << why;
      // A fresh queue per test: the test's name.
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      std::string name = std::string(info->name());
      for (char& c : name) if (c == '/') c = '-';
      backend_ = std::make_unique<RedisBackend>(server, name);
    }
    q_ = backend_->open();
    ASSERT_NE(q_, nullptr);
  }

  static std::vector<WorkItem> items(int begin, int end) {
    std::vector<WorkItem> out;
    for (int i = begin; i < end; ++i) out.push_back({"k" + std::to_string(i), "payload " + std::to_string(i)});
    return out;
  }
  static std::vector<std::string> keys(const std::vector<ClaimedItem>& claimed) {
    std::vector<std::string> out;
    for (const ClaimedItem& c : claimed) out.push_back(c.key);
    return out;
  }
  static std::vector<std::string> results_for(const std::vector<ClaimedItem>& claimed, const std::string& who) {
    std::vector<std::string> out;
    for (const ClaimedItem& c : claimed) out.push_back(who + ":" + c.key);
    return out;
  }
  std::vector<ClaimedItem> claim(WorkQueue& q, const std::string& consumer, int64_t max, int64_t min_idle_ms = -1) {
    auto r = q.claim(consumer, {.max_items = max, .min_idle_ms = min_idle_ms, .wait_ms = 0});
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    return r ? *r : std::vector<ClaimedItem>{};
  }
  WorkProgress progress(WorkQueue& q) {
    auto p = q.progress();
    EXPECT_TRUE(p.has_value()) << p.status().to_string();
    return p ? *p : WorkProgress{};
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<WorkQueue> q_;
};

TEST_P(WorkQueueTest, AddClaimCompleteInOrder) {
  ASSERT_TRUE(q_->add(items(0, 5), 0).ok());
  auto a = claim(*q_, "a", 3);
  EXPECT_EQ(keys(a), (std::vector<std::string>{"k0", "k1", "k2"}));
  EXPECT_EQ(a[1].payload, "payload 1");
  auto b = claim(*q_, "b", 10);
  EXPECT_EQ(keys(b), (std::vector<std::string>{"k3", "k4"}));
  EXPECT_TRUE(claim(*q_, "c", 10).empty());

  WorkProgress p = progress(*q_);
  EXPECT_EQ(p.total, 5);
  EXPECT_EQ(p.done, 0);
  EXPECT_EQ(p.pending, 5);
  EXPECT_EQ(p.pending_by_consumer, (std::map<std::string, int64_t>{{"a", 3}, {"b", 2}}));

  auto done = q_->complete("a", a, results_for(a, "a"));
  ASSERT_TRUE(done.has_value()) << done.status().to_string();
  EXPECT_EQ(*done, 3);
  p = progress(*q_);
  EXPECT_EQ(p.done, 3);
  EXPECT_EQ(p.pending, 2);
  EXPECT_FALSE(p.finished());

  const std::vector<std::string> ask = {"k0", "k3", "k2", "nope"};
  auto r = q_->results(ask);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0], std::optional<std::string>("a:k0"));
  EXPECT_EQ((*r)[1], std::nullopt);
  EXPECT_EQ((*r)[2], std::optional<std::string>("a:k2"));
  EXPECT_EQ((*r)[3], std::nullopt);

  ASSERT_TRUE(q_->close().ok());
  EXPECT_EQ(*q_->complete("b", b, results_for(b, "b")), 2);
  p = progress(*q_);
  EXPECT_EQ(p.total, 5);
  EXPECT_EQ(p.done, 5);
  EXPECT_EQ(p.pending, 0);
  EXPECT_TRUE(p.pending_by_consumer.empty());
  EXPECT_TRUE(p.finished());
}

TEST_P(WorkQueueTest, DeadConsumersPendingItemsAreClaimedByAnotherOnceIdle) {
  ASSERT_TRUE(q_->add(items(0, 4), 0).ok());
  auto dead = claim(*q_, "dead", 2);  // claims and never completes
  ASSERT_EQ(keys(dead), (std::vector<std::string>{"k0", "k1"}));
  backend_->age(300);
  // Not idle long enough: only new items.
  auto live = claim(*q_, "live", 10, /*min_idle_ms=*/600000);
  EXPECT_EQ(keys(live), (std::vector<std::string>{"k2", "k3"}));
  EXPECT_EQ(*q_->complete("live", live, results_for(live, "live")), 2);
  // Idle long enough: the dead consumer's items, in order.
  auto taken = claim(*q_, "live", 10, /*min_idle_ms=*/200);
  EXPECT_EQ(keys(taken), (std::vector<std::string>{"k0", "k1"}));
  EXPECT_EQ(taken[0].payload, "payload 0");
  EXPECT_TRUE(taken[0].reclaimed);
  EXPECT_FALSE(live[0].reclaimed);
  WorkProgress p = progress(*q_);
  EXPECT_EQ(p.pending_by_consumer, (std::map<std::string, int64_t>{{"live", 2}}));
  // Just taken over: not idle any more.
  EXPECT_TRUE(claim(*q_, "third", 10, 200).empty());
  EXPECT_EQ(*q_->complete("live", taken, results_for(taken, "live")), 2);
  ASSERT_TRUE(q_->close().ok());
  p = progress(*q_);
  EXPECT_TRUE(p.finished());
  EXPECT_EQ(p.done, 4);
}

TEST_P(WorkQueueTest, ReclaimedItemsComeFirstThenNewOnes) {
  ASSERT_TRUE(q_->add(items(0, 5), 0).ok());
  auto dead = claim(*q_, "dead", 2);
  backend_->age(300);
  auto mixed = claim(*q_, "live", 3, 200);
  EXPECT_EQ(keys(mixed), (std::vector<std::string>{"k0", "k1", "k2"}));
  EXPECT_TRUE(mixed[0].reclaimed);
  EXPECT_TRUE(mixed[1].reclaimed);
  EXPECT_FALSE(mixed[2].reclaimed);
}

TEST_P(WorkQueueTest, DoubleCompletionKeepsTheFirstResultAndCountsOnce) {
  ASSERT_TRUE(q_->add(items(0, 1), 0).ok());
  ASSERT_TRUE(q_->close().ok());
  auto slow = claim(*q_, "slow", 1);
  backend_->age(300);
  auto fast = claim(*q_, "fast", 1, 200);
  ASSERT_EQ(keys(fast), (std::vector<std::string>{"k0"}));
  EXPECT_EQ(*q_->complete("fast", fast, results_for(fast, "fast")), 1);
  // The slow consumer wakes up and completes what was taken from it: ignored.
  EXPECT_EQ(*q_->complete("slow", slow, results_for(slow, "slow")), 0);
  EXPECT_EQ(*q_->complete("fast", fast, results_for(fast, "again")), 0);
  const std::vector<std::string> k0 = {"k0"};
  EXPECT_EQ((*q_->results(k0))[0], std::optional<std::string>("fast:k0"));
  WorkProgress p = progress(*q_);
  EXPECT_EQ(p.done, 1);
  EXPECT_EQ(p.pending, 0);
  EXPECT_TRUE(p.finished());
}

TEST_P(WorkQueueTest, TheOriginalConsumerMayStillFinishFirst) {
  ASSERT_TRUE(q_->add(items(0, 1), 0).ok());
  auto slow = claim(*q_, "slow", 1);
  backend_->age(300);
  auto fast = claim(*q_, "fast", 1, 200);
  ASSERT_EQ(fast.size(), 1u);
  // The item now belongs to "fast", but the result of "slow" is a correct one: it wins and
  // acknowledges the item, whoever holds it.
  EXPECT_EQ(*q_->complete("slow", slow, results_for(slow, "slow")), 1);
  EXPECT_EQ(progress(*q_).pending, 0);
  EXPECT_EQ(*q_->complete("fast", fast, results_for(fast, "fast")), 0);
  const std::vector<std::string> k0 = {"k0"};
  EXPECT_EQ((*q_->results(k0))[0], std::optional<std::string>("slow:k0"));
  EXPECT_EQ(progress(*q_).done, 1);
}

TEST_P(WorkQueueTest, AddChecksTheExpectedTotalAndRefusesOnceClosed) {
  ASSERT_TRUE(q_->add(items(0, 2), 0).ok());
  auto again = backend_->open();  // a second producer, or a re-run that miscounted
  Status dup = again->add(items(0, 2), 0);
  EXPECT_EQ(dup.code(), StatusCode::failed_precondition) << dup.to_string();
  EXPECT_NE(dup.message().find("holds 2 items"), std::string::npos) << dup.message();
  ASSERT_TRUE(again->add(items(2, 3), 2).ok());
  ASSERT_TRUE(q_->add({}, 3).ok());
  EXPECT_EQ(progress(*q_).total, 3);
  ASSERT_TRUE(q_->close().ok());
  Status closed = q_->add(items(3, 4), 3);
  EXPECT_EQ(closed.code(), StatusCode::failed_precondition);
  EXPECT_NE(closed.message().find("closed"), std::string::npos) << closed.message();
  WorkProgress p = progress(*q_);
  EXPECT_EQ(p.total, 3);
  EXPECT_TRUE(p.closed);
  EXPECT_FALSE(p.finished());
  EXPECT_EQ(keys(claim(*q_, "a", 10)), (std::vector<std::string>{"k0", "k1", "k2"}));
}

TEST_P(WorkQueueTest, BadArgumentsAreErrors) {
  ASSERT_TRUE(q_->add(items(0, 2), 0).ok());
  const std::vector<WorkItem> no_key = {{"", "x"}};
  EXPECT_EQ(q_->add(no_key, 2).code(), StatusCode::invalid_argument);
  EXPECT_EQ(progress(*q_).total, 2);
  EXPECT_EQ(q_->claim("", {}).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(q_->claim("a", {.max_items = 0}).status().code(), StatusCode::invalid_argument);
  auto a = claim(*q_, "a", 2);
  const std::vector<std::string> one = {"r"};
  EXPECT_EQ(q_->complete("a", a, one).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(progress(*q_).done, 0);
}

TEST_P(WorkQueueTest, BinaryPayloadsAndResultsRoundTrip) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  const std::vector<WorkItem> in = {{"bin", bytes + bytes}};
  ASSERT_TRUE(q_->add(in, 0).ok());
  auto a = claim(*q_, "a", 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].payload, bytes + bytes);
  const std::vector<std::string> result = {std::string("\0\xff\0", 3) + bytes};
  EXPECT_EQ(*q_->complete("a", a, result), 1);
  const std::vector<std::string> key = {"bin"};
  EXPECT_EQ((*q_->results(key))[0], std::optional<std::string>(result[0]));
}

TEST_P(WorkQueueTest, AttributesKeepTheFirstValue) {
  EXPECT_EQ(*q_->attribute("space"), std::nullopt);
  EXPECT_EQ(*q_->set_attribute_once("space", "A"), "A");
  auto other = backend_->open();
  EXPECT_EQ(*other->set_attribute_once("space", "B"), "A");
  EXPECT_EQ(*other->attribute("space"), std::optional<std::string>("A"));
}

TEST_P(WorkQueueTest, ManyConsumersTogetherDeliverEveryItemExactlyOnce) {
  constexpr int kItems = 2000;
  ASSERT_TRUE(q_->add(items(0, kItems), 0).ok());
  ASSERT_TRUE(q_->close().ok());
  std::vector<std::thread> workers;
  std::vector<std::vector<std::string>> seen(3);
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      auto q = backend_->open();  // Redis handles are one per thread
      const std::string me = "w" + std::to_string(w);
      for (;;) {
        auto got = q->claim(me, {.max_items = 7, .min_idle_ms = -1, .wait_ms = 0});
        if (!got || got->empty()) break;
        for (const ClaimedItem& c : *got) seen[w].push_back(c.key);
        if (!q->complete(me, *got, results_for(*got, me)).has_value()) break;
      }
    });
  }
  for (auto& t : workers) t.join();
  std::set<std::string> all;
  size_t count = 0;
  for (const auto& s : seen) {
    all.insert(s.begin(), s.end());
    count += s.size();
  }
  EXPECT_EQ(count, size_t(kItems));
  EXPECT_EQ(all.size(), size_t(kItems));
  WorkProgress p = progress(*q_);
  EXPECT_EQ(p.done, kItems);
  EXPECT_TRUE(p.finished());
}

TEST_P(WorkQueueTest, ClaimWithAWaitReturnsEmptyWhenNothingComes) {
  auto got = q_->claim("a", {.max_items = 5, .min_idle_ms = 0, .wait_ms = 20});
  ASSERT_TRUE(got.has_value()) << got.status().to_string();
  EXPECT_TRUE(got->empty());
}

TEST_P(WorkQueueTest, ClaimWithAWaitSeesItemsAddedMeanwhile) {
  auto producer = backend_->open();
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(producer->add(items(0, 1), 0).ok());
  });
  // Waits until the item comes (the wait is far longer than the producer's delay).
  std::vector<ClaimedItem> got;
  for (int i = 0; i < 10 && got.empty(); ++i) {
    auto r = q_->claim("a", {.max_items = 5, .min_idle_ms = -1, .wait_ms = 5000});
    ASSERT_TRUE(r.has_value());
    got = *r;
  }
  t.join();
  EXPECT_EQ(keys(got), (std::vector<std::string>{"k0"}));
}

INSTANTIATE_TEST_SUITE_P(Backends, WorkQueueTest, ::testing::Values("in_process", "redis"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace prism::serving

// What only the Redis WorkQueue has: addresses and job names, its key layout, errors of an
// unreachable or misused server, and XAUTOCLAIM paging through a long pending list. The
// shared contract is tests/serving/work_queue_test.cpp.
#include "serving/redis_work_queue.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <set>
#include <thread>

#include "test_util/redis_server.h"

namespace prism::serving {
namespace {

TEST(RedisEndpoint, ParsesHostAndPort) {
  auto a = parse_redis_endpoint("10.0.0.5:7000");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 7000);
  auto b = parse_redis_endpoint("redis.internal");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->port, 6379);
  auto c = parse_redis_endpoint("[::1]:6380");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 6380);
  EXPECT_EQ(c->to_string(), "[::1]:6380");
  for (const char* bad : {"", ":6379", "host:", "host:0", "host:65536", "host:12x", "::1:6379", "[::1", "[::1]x"}) {
    auto r = parse_redis_endpoint(bad);
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << bad;
    EXPECT_NE(r.status().message().find("HOST:PORT"), std::string::npos) << r.status().message();
  }
}

TEST(RedisQueueName, LettersDigitsDotsDashesUnderscores) {
  EXPECT_TRUE(check_queue_name("job-2024.06_a").ok());
  EXPECT_EQ(check_queue_name("").code(), StatusCode::invalid_argument);
  EXPECT_EQ(check_queue_name("a b").code(), StatusCode::invalid_argument);
  EXPECT_EQ(check_queue_name("a}b").code(), StatusCode::invalid_argument);
  EXPECT_EQ(check_queue_name(std::string(201, 'a')).code(), StatusCode::invalid_argument);
  EXPECT_EQ(RedisWorkQueue::key_prefix("j"), "prism:queue:{j}:");
}

class RedisWorkQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = test::RedisServer::start("redis_work_queue_test");
    if (!s) GTEST_SKIP() << "no redis-server to test against: " << s.status().message();
    server_ = std::move(*s);
    endpoint_ = *parse_redis_endpoint(server_->address());
  }
  std::unique_ptr<RedisWorkQueue> open(const std::string& name) {
    auto q = RedisWorkQueue::open(endpoint_, name);
    EXPECT_TRUE(q.has_value()) << q.status().to_string();
    return q ? std::move(*q) : nullptr;
  }
  // A raw command through hiredis (what redis-cli would do).
  std::string raw(const std::vector<std::string>& args) {
    redisContext* c = redisConnect(server_->host().c_str(), server_->port());
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (const auto& a : args) {
      argv.push_back(a.data());
      len.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), len.data()));
    std::string out = !r ? "(no reply)"
                      : r->type == REDIS_REPLY_INTEGER ? std::to_string(r->integer)
                      : r->str ? std::string(r->str, r->len)
                               : "(type " + std::to_string(r->type) + ")";
    if (r) freeReplyObject(r);
    redisFree(c);
    return out;
  }

  std::unique_ptr<test::RedisServer> server_;
  RedisEndpoint endpoint_;
};

TEST_F(RedisWorkQueueTest, KeysFollowTheDocumentedLayout) {
  auto q = open("layout");
  const std::vector<WorkItem> items = {{"doc-0", "p0"}, {"doc-1", "p1"}};
  ASSERT_TRUE(q->add(items, 0).ok());
  ASSERT_TRUE(q->close().ok());
  EXPECT_EQ(raw({"TYPE", "prism:queue:{layout}:items"}), "stream");
  EXPECT_EQ(raw({"XLEN", "prism:queue:{layout}:items"}), "2");
  EXPECT_EQ(raw({"HGET", "prism:queue:{layout}:meta", "total"}), "2");
  EXPECT_EQ(raw({"HGET", "prism:queue:{layout}:meta", "closed"}), "1");
  auto got = q->claim("w", {.max_items = 1, .min_idle_ms = -1});
  ASSERT_TRUE(got.has_value());
  const std::vector<std::string> results = {"vector bytes"};
  ASSERT_EQ(*q->complete("w", *got, results), 1);
  EXPECT_EQ(raw({"HGET", "prism:queue:{layout}:results", "doc-0"}), "vector bytes");
  EXPECT_EQ(raw({"XPENDING", "prism:queue:{layout}:items", "workers", "-", "+", "10"}), "(type 2)");  // an array
  ASSERT_TRUE(q->set_attribute_once("space", "abc").has_value());
  EXPECT_EQ(raw({"HGET", "prism:queue:{layout}:attributes", "space"}), "abc");
}

TEST_F(RedisWorkQueueTest, StateOutlivesTheConnection) {
  {
    auto q = open("durable");
    const std::vector<WorkItem> items = {{"a", "1"}, {"b", "2"}};
    ASSERT_TRUE(q->add(items, 0).ok());
    auto got = q->claim("w", {.max_items = 1, .min_idle_ms = -1});
    ASSERT_EQ(got->size(), 1u);
  }  // the "process" goes away holding item a
  auto q = open("durable");
  WorkProgress p = *q->progress();
  EXPECT_EQ(p.total, 2);
  EXPECT_EQ(p.pending, 1);
  EXPECT_EQ(p.pending_by_consumer.at("w"), 1);
  auto got = q->claim("w2", {.max_items = 5, .min_idle_ms = 0});
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->size(), 2u);  // a taken over (idle >= 0 ms), then b new
  EXPECT_EQ((*got)[0].key, "a");
  EXPECT_EQ((*got)[1].key, "b");
}

TEST_F(RedisWorkQueueTest, ReclaimPagesThroughALongPendingList) {
  auto q = open("paging");
  std::vector<WorkItem> items;
  for (int i = 0; i < 300; ++i) items.push_back({"k" + std::to_string(i), "p"});
  ASSERT_TRUE(q->add(items, 0).ok());
  for (int i = 0; i < 30; ++i) ASSERT_EQ(q->claim("dead", {.max_items = 10, .min_idle_ms = -1})->size(), 10u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Small claims: XAUTOCLAIM continues from its cursor and never hands out an item twice
  // (what it took is not idle any more).
  std::set<std::string> taken;
  size_t count = 0;
  for (int round = 0; round < 100; ++round) {
    auto got = q->claim("live", {.max_items = 7, .min_idle_ms = 200});
    ASSERT_TRUE(got.has_value()) << got.status().to_string();
    if (got->empty()) break;
    for (const ClaimedItem& c : *got) taken.insert(c.key);
    count += got->size();
  }
  EXPECT_EQ(count, 300u);
  EXPECT_EQ(taken.size(), 300u);
  EXPECT_EQ(q->progress()->pending_by_consumer, (std::map<std::string, int64_t>{{"live", 300}}));
}

TEST_F(RedisWorkQueueTest, AKeyOfAnotherTypeIsAClearError) {
  raw({"SET", "prism:queue:{clash}:items", "not a stream"});
  auto q = RedisWorkQueue::open(endpoint_, "clash");
  ASSERT_FALSE(q.has_value());
  EXPECT_EQ(q.status().code(), StatusCode::failed_precondition);
  EXPECT_NE(q.status().message().find("WRONGTYPE"), std::string::npos) << q.status().message();
}

TEST_F(RedisWorkQueueTest, ABadJobNameIsRefusedBeforeConnecting) {
  auto q = RedisWorkQueue::open(endpoint_, "a b");
  EXPECT_EQ(q.status().code(), StatusCode::invalid_argument);
}

TEST_F(RedisWorkQueueTest, AnUnreachableServerIsUnavailableNotAHang) {
  auto q = open("gone");
  ASSERT_TRUE(q->add(std::vector<WorkItem>{{"a", "1"}}, 0).ok());
  server_->kill();
  auto got = q->claim("w", {.max_items = 1, .min_idle_ms = -1});
  EXPECT_EQ(got.status().code(), StatusCode::unavailable);
  EXPECT_NE(got.status().message().find(endpoint_.to_string()), std::string::npos) << got.status().message();
  EXPECT_EQ(q->progress().status().code(), StatusCode::unavailable);  // reconnect fails too

  auto never = RedisWorkQueue::open(endpoint_, "gone");
  EXPECT_EQ(never.status().code(), StatusCode::unavailable);
  EXPECT_NE(never.status().message().find("cannot connect to redis at " + endpoint_.to_string()), std::string::npos)
      << never.status().message();
}

}  // namespace
}  // namespace prism::serving

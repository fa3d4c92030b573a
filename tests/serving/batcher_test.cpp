// plan_batch, table-driven: no threads, no clock. Each case lists the waiting requests as
// (cost, age in µs, deadline in µs from now or none) and the expected {size, wait_us}.
#include "serving/batcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace prism::serving {
namespace {

constexpr int64_t kNone = -1;

struct Item {
  int64_t cost;
  int64_t age_us;
  int64_t deadline_in_us = kNone;
};

struct Case {
  std::string name;
  BatchPolicy policy;
  std::vector<Item> items;
  bool flush;
  BatchPlan want;
};

BatchPolicy policy(int max_size, int64_t max_tokens, int64_t delay_us, bool padded = false,
                   std::vector<int> preferred = {}) {
  BatchPolicy p;
  p.max_batch_size = max_size;
  p.max_batch_tokens = max_tokens;
  p.max_queue_delay_us = delay_us;
  p.padded_cost = padded;
  p.preferred_batch_sizes = std::move(preferred);
  return p;
}

std::vector<Case> cases() {
  return {
      {"empty queue waits for a push", policy(8, 100, 0), {}, false, {0, kWaitForPush}},
      {"empty queue waits for a push even flushing", policy(8, 100, 0), {}, true, {0, kWaitForPush}},
      {"no delay sends what waits", policy(8, 100, 0), {{5, 0}, {5, 0}, {5, 0}}, false, {3, 0}},
      {"size cap", policy(2, 100, 0), {{1, 0}, {1, 0}, {1, 0}}, false, {2, 0}},
      {"size cap reached sends despite delay", policy(2, 100, 5000), {{1, 0}, {1, 0}, {1, 0}}, false, {2, 0}},
      {"unpadded token budget: sum of costs", policy(8, 10, 0), {{4, 0}, {4, 0}, {4, 0}}, false, {2, 0}},
      {"budget exactly met is allowed", policy(8, 12, 0), {{4, 0}, {4, 0}, {4, 0}}, false, {3, 0}},
      {"padded budget: size times longest", policy(8, 12, 0, true), {{2, 0}, {5, 0}, {1, 0}}, false, {2, 0}},
      {"padded fits when all short", policy(8, 12, 0, true), {{2, 0}, {3, 0}, {1, 0}, {3, 0}}, false, {4, 0}},
      {"FIFO: stops at the first that does not fit", policy(8, 10, 0), {{6, 0}, {6, 0}, {1, 0}}, false, {1, 0}},
      {"one request over budget goes alone", policy(8, 10, 0), {{50, 0}, {1, 0}}, false, {1, 0}},
      {"one request over budget goes alone despite delay", policy(8, 10, 5000), {{50, 0}}, false, {1, 0}},
      {"budget stop sends despite delay", policy(8, 10, 5000), {{6, 0}, {6, 0}}, false, {1, 0}},
      {"delay: wait for the rest of it", policy(8, 100, 1000), {{1, 300}, {1, 100}}, false, {0, 700}},
      {"delay measured from the oldest", policy(8, 100, 1000), {{1, 999}, {1, 0}}, false, {0, 1}},
      {"delay expired sends", policy(8, 100, 1000), {{1, 1000}, {1, 10}}, false, {2, 0}},
      {"delay long expired sends", policy(8, 100, 1000), {{1, 5000}}, false, {1, 0}},
      {"flush ignores the delay", policy(8, 100, 1000), {{1, 0}, {1, 0}}, true, {2, 0}},
      {"deadline sooner than the delay sends now", policy(8, 100, 1000), {{1, 0}, {1, 0, 500}}, false, {2, 0}},
      {"deadline later than the delay waits", policy(8, 100, 1000), {{1, 0, 5000}}, false, {0, 1000}},
      {"preferred: largest reached sends", policy(32, 1000, 5000, false, {4, 8}),
       {{1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}}, false, {8, 0}},
      {"preferred: below largest waits", policy(32, 1000, 5000, false, {4, 8}),
       {{1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}}, false, {0, 5000}},
      {"preferred: at expiry trims to a preferred size", policy(32, 1000, 5000, false, {4, 8}),
       {{1, 6000}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}}, false, {4, 0}},
      {"preferred: none fits, sends all", policy(32, 1000, 5000, false, {4, 8}), {{1, 6000}, {1, 0}}, false,
       {2, 0}},
      {"preferred with no delay trims at once", policy(32, 1000, 0, false, {2, 4}), {{1, 0}, {1, 0}, {1, 0}}, false,
       {2, 0}},
      {"preferred: flush sends all", policy(32, 1000, 5000, false, {4, 8}), {{1, 0}, {1, 0}, {1, 0}}, true, {3, 0}},
  };
}

TEST(PlanBatch, Table) {
  const auto now = Clock::time_point() + std::chrono::seconds(100);
  for (const Case& c : cases()) {
    std::vector<QueuedView> views;
    for (const Item& it : c.items) {
      QueuedView v;
      v.cost_tokens = it.cost;
      v.enqueued = now - std::chrono::microseconds(it.age_us);
      v.deadline = it.deadline_in_us == kNone ? Clock::time_point::max() : now + std::chrono::microseconds(it.deadline_in_us);
      views.push_back(v);
    }
    BatchPlan got = plan_batch(views, c.policy, now, c.flush);
    EXPECT_EQ(got.size, c.want.size) << c.name;
    EXPECT_EQ(got.wait_us, c.want.wait_us) << c.name;
  }
}

TEST(PlanBatch, CostModels) {
  std::vector<QueuedView> v(3);
  v[0].cost_tokens = 2;
  v[1].cost_tokens = 7;
  v[2].cost_tokens = 3;
  EXPECT_EQ(batch_cost(v, 3, false), 12);
  EXPECT_EQ(batch_cost(v, 3, true), 21);
  EXPECT_EQ(batch_cost(v, 1, true), 2);
  EXPECT_EQ(batch_cap(policy(16, 1, 0)), 16);
  EXPECT_EQ(batch_cap(policy(16, 1, 0, false, {2, 8})), 8);
}

}  // namespace
}  // namespace prism::serving

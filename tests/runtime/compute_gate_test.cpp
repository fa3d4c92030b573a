// The compute gate: busy deployments never run more compute threads than the pool has
// (counted inside real OpenMP teams), shares of the pool run side by side, arrival order holds.
#include "runtime/compute_gate.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace prism {
namespace {

// Counts OpenMP threads that are inside a parallel region at the same moment, process-wide.
struct ThreadCounter {
  std::atomic<int> live{0};
  std::atomic<int> most{0};
  void enter() {
    const int now = ++live;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
  }
  void leave() { --live; }
};

// One "deployment": an engine thread stepping `steps` times, each step a forward on its team.
void run_deployment(ComputeGate& gate, int team, int steps, ThreadCounter& counter) {
  omp_set_num_threads(team);
  for (int s = 0; s < steps; ++s) {
    ComputeGate::Lease lease = gate.acquire(team);
#pragma omp parallel num_threads(team)
    {
      counter.enter();
      volatile double x = 0;
      for (int i = 0; i < 20000; ++i) x = x + i;  // some work, so teams would overlap
      counter.leave();
    }
  }
}

TEST(ComputeGate, TwoBusyDeploymentsNeverRunMoreThreadsThanThePool) {
  ComputeGate gate(2);
  ThreadCounter counter;
  std::thread a(run_deployment, std::ref(gate), 2, 300, std::ref(counter));
  std::thread b(run_deployment, std::ref(gate), 2, 300, std::ref(counter));
  a.join();
  b.join();
  EXPECT_EQ(gate.max_in_use(), 2);
  EXPECT_LE(counter.most.load(), 2);
  EXPECT_EQ(gate.in_use(), 0);
}

TEST(ComputeGate, SharesOfThePoolRunSideBySide) {
  ComputeGate gate(4);
  ComputeGate::Lease first = gate.acquire(2);
  // A second share fits beside the first: it must not wait for it.
  auto second = std::async(std::launch::async, [&] { return gate.acquire(2).threads(); });
  ASSERT_EQ(second.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(second.get(), 2);
  EXPECT_EQ(gate.max_in_use(), 4);
}

TEST(ComputeGate, LeasesAreClampedToThePool) {
  ComputeGate gate(2);
  EXPECT_EQ(gate.acquire(16).threads(), 2);
  EXPECT_EQ(gate.acquire(0).threads(), 1);
  EXPECT_EQ(gate.in_use(), 0);
}

TEST(ComputeGate, ArrivalOrderHoldsEvenWhenALaterLeaseWouldFit) {
  ComputeGate gate(2);
  std::mutex mu;
  std::vector<int> order;
  std::optional<ComputeGate::Lease> held(gate.acquire(2));
  // A wide lease arrives first, then a narrow one; the narrow one must not pass it.
  std::thread wide([&] {
    ComputeGate::Lease l = gate.acquire(2);
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(2);
  });
  while (gate.waiting() < 1) std::this_thread::yield();
  std::thread narrow([&] {
    ComputeGate::Lease l = gate.acquire(1);
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  });
  while (gate.waiting() < 2) std::this_thread::yield();
  held.reset();
  wide.join();
  narrow.join();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], 2);
  EXPECT_EQ(order[1], 1);
}

TEST(ComputeGate, ANestedLeaseIsEmptyAndDoesNotWait) {
  // A step holding the whole pool runs an encoder that asks again: waiting would deadlock.
  ComputeGate gate(2);
  ComputeGate::Lease outer = gate.acquire(2);
  {
    ComputeGate::Lease inner = gate.acquire(2);
    EXPECT_EQ(inner.threads(), 0);
    EXPECT_EQ(gate.in_use(), 2);
  }
  EXPECT_EQ(gate.in_use(), 2);
}

TEST(ComputeGate, ASmallerPoolAdmitsOnlyWhatFits) {
  ComputeGate gate(4);
  std::optional<ComputeGate::Lease> held(gate.acquire(3));
  gate.set_capacity(2);
  EXPECT_EQ(gate.capacity(), 2);
  auto next = std::async(std::launch::async, [&] { return gate.acquire(2).threads(); });
  while (gate.waiting() < 1) std::this_thread::yield();
  EXPECT_EQ(gate.in_use(), 3);  // 3 + 2 > 2: it waits
  held.reset();
  EXPECT_EQ(next.get(), 2);
  EXPECT_EQ(gate.in_use(), 0);
}

TEST(ComputeGate, DisabledLeasesNeverWait) {
  // [server] compute_gate = false: deployments overlap, and max_in_use shows it.
  ComputeGate gate(2);
  gate.set_enabled(false);
  ComputeGate::Lease first = gate.acquire(2);
  auto second = std::async(std::launch::async, [&] { return gate.acquire(2).threads(); });
  ASSERT_EQ(second.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(second.get(), 2);
  EXPECT_EQ(gate.max_in_use(), 4);
}

}  // namespace
}  // namespace prism

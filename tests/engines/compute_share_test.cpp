// One compute pool for every deployment, at the engine level: two chat deployments of the demo
// chat model (a real Llama, models/llama) stepping at the same moment never run more threads
// inside OpenMP regions than the pool has (counted by runtime/threads.h's census, and by the
// gate), both compute (each deployment's prism_compute_busy_seconds_total grows), and the
// replicas of one deployment split the pool instead of taking turns on it.
// Counts, never times.
#include <gtest/gtest.h>

#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engines/generate/generate_engine_factory.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "models/llama/llama.h"
#include "runtime/compute_gate.h"
#include "runtime/threads.h"
#include "serving/deployment.h"
#include "test_util/paths.h"
#include "tools/demo/demo_chat.h"

namespace prism::engines::generate {
namespace {

constexpr int kPool = 2;

const std::string& demo_chat_dir() {
  static const std::string dir = [] {
    std::string d = test::scratch_dir("compute_share_demo_chat");
    Status s = tools::demo::write_demo_chat(d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return dir;
}

struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  int left = 0;
  int failed = 0;
  void done(bool ok) {
    std::lock_guard lock(mu);
    --left;
    failed += ok ? 0 : 1;
    cv.notify_all();
  }
  bool wait() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(300), [&] { return left == 0; });
  }
};

class ChatDeployment {
 public:
  ChatDeployment(const std::string& name, int replicas, serving::MetricsRegistry& metrics) {
    serving::DeploymentConfig c;
    c.name = name;
    c.task = "chat";
    c.model = demo_chat_dir();
    c.replicas = replicas;
    c.batching.max_batch_size = 8;
    config_ = c;
    DecoderLoader loader = [](const serving::DeploymentConfig& config, ops::Precision p) {
      return models::load_llama(config.model, p);
    };
    d_ = std::make_unique<serving::Deployment>(
        config_, serving::EngineKind(generate_engine_factory(loader), generate_frontend_factory()), metrics);
    d_->start();
    status_ = d_->wait_ready();
  }
  ~ChatDeployment() { d_->stop(); }
  const Status& status() const { return status_; }

  // `n` greedy requests of `tokens` tokens each, prompts of 24 to 40 ids.
  void submit(int n, int tokens, Waiter& w) {
    for (int i = 0; i < n; ++i) {
      auto in = std::make_unique<frontends::GenerateInput>();
      for (int t = 0; t < 24 + 2 * i; ++t) in->prompt.push_back(5 + (t * 7 + i) % 200);
      in->sampling.temperature = 0.0f;
      in->sampling.max_tokens = tokens;
      in->sampling.ignore_eos = true;
      serving::RequestPtr r =
          serving::make_request(std::move(in), [&w](Result<serving::PayloadPtr> res) { w.done(res.has_value()); });
      r->cost_tokens = 40;
      {
        std::lock_guard lock(w.mu);
        ++w.left;
      }
      ASSERT_TRUE(d_->submit(r).ok());
    }
  }

 private:
  serving::DeploymentConfig config_;
  std::unique_ptr<serving::Deployment> d_;
  Status status_;
};

double series(const serving::MetricsRegistry& m, const std::string& name, const std::string& deployment) {
  std::istringstream text(m.render());
  for (std::string line; std::getline(text, line);)
    if (line.starts_with(name + "{") && line.find("deployment=\"" + deployment + "\"") != std::string::npos)
      return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

class ComputeShare : public testing::Test {
 protected:
  void SetUp() override {
    set_num_threads(kPool);  // the gate's capacity follows
    ComputeGate::process().set_enabled(true);
  }
  void TearDown() override {
    thread_census::enable(false);
    set_num_threads(0);
  }
};

TEST_F(ComputeShare, TwoBusyDeploymentsNeverRunMoreThreadsThanThePool) {
  serving::MetricsRegistry metrics;
  ChatDeployment a("chat-a", 1, metrics), b("chat-b", 1, metrics);
  ASSERT_TRUE(a.status().ok()) << a.status().message();
  ASSERT_TRUE(b.status().ok()) << b.status().message();
  ASSERT_EQ(ComputeGate::process().capacity(), kPool);

  thread_census::enable(true);
  ComputeGate::process().reset_max_in_use();
  Waiter w;
  // Both deployments busy at once: prefills of 8 prompts, then 48 decode steps each.
  a.submit(8, 48, w);
  b.submit(8, 48, w);
  ASSERT_TRUE(w.wait());
  EXPECT_EQ(w.failed, 0);

  std::cout << thread_census::regions() << " parallel regions (" << thread_census::beyond_lease()
            << " wider than their thread's lease); threads in teams at once: at most " << thread_census::most()
            << "; leased at once: at most " << ComputeGate::process().max_in_use() << " (pool " << kPool << ")\n";
  EXPECT_LE(ComputeGate::process().max_in_use(), kPool);
  EXPECT_EQ(ComputeGate::process().max_in_use(), kPool);  // each step leases the whole pool
  EXPECT_GT(thread_census::regions(), 0);                 // the census saw the engines' teams
  EXPECT_EQ(thread_census::beyond_lease(), 0);            // every team ran inside a turn
  EXPECT_LE(thread_census::most(), kPool);
  EXPECT_GT(series(metrics, "prism_compute_busy_seconds_total", "chat-a"), 0.0);
  EXPECT_GT(series(metrics, "prism_compute_busy_seconds_total", "chat-b"), 0.0);
  EXPECT_GE(series(metrics, "prism_compute_wait_seconds_total", "chat-a"), 0.0);
  EXPECT_GE(series(metrics, "prism_compute_wait_seconds_total", "chat-b"), 0.0);
}

TEST_F(ComputeShare, ReplicasSplitThePool) {
  // Two replicas of one deployment: a team of kPool / 2 each, so both fit in the gate at once
  // and neither ever waits for the other, and together they still stay within the pool.
  serving::MetricsRegistry metrics;
  ChatDeployment d("chat-replicas", 2, metrics);
  ASSERT_TRUE(d.status().ok()) << d.status().message();

  thread_census::enable(true);
  ComputeGate::process().reset_max_in_use();
  Waiter w;
  d.submit(8, 32, w);
  ASSERT_TRUE(w.wait());
  EXPECT_EQ(w.failed, 0);
  EXPECT_LE(ComputeGate::process().max_in_use(), kPool);
  EXPECT_EQ(thread_census::beyond_lease(), 0);
  EXPECT_LE(thread_census::most(), kPool);
  EXPECT_EQ(series(metrics, "prism_compute_wait_seconds_total", "chat-replicas"), 0.0);
}

}  // namespace
}  // namespace prism::engines::generate

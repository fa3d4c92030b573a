// Deployments end to end with test engines: many producers, exactly-once completion, batch
// limits, cancellation, deadlines, lanes, admission, load failure, drain and metrics.
// A gate engine blocks inside run_batch until the test opens it, so queue states are built
// deterministically; no test asserts on time (waits are generous upper bounds only).
#include "serving/deployment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "serving/deployment_set.h"
#include "serving/echo_engine.h"

namespace prism::serving {
namespace {

constexpr auto kGenerous = std::chrono::seconds(60);

// Collects completions by key; counts calls to check exactly-once.
class Collector {
 public:
  Completion completion(const std::string& key) {
    return [this, key](Result<PayloadPtr> r) {
      std::lock_guard lock(mu_);
      Entry& e = entries_[key];
      ++e.calls;
      e.status = r.status();
      if (r.has_value()) {
        auto* p = dynamic_cast<EchoPayload*>(r.value().get());
        e.text = p ? p->text : "<not echo>";
      }
      ++total_;
      cv_.notify_all();
    };
  }
  bool wait_total(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kGenerous, [&] { return total_ >= n; });
  }
  struct Entry {
    int calls = 0;
    Status status;
    std::string text;
  };
  Entry get(const std::string& key) {
    std::lock_guard lock(mu_);
    return entries_[key];
  }
  int total() {
    std::lock_guard lock(mu_);
    return total_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;
  int total_ = 0;
};

// Blocks every batch until opened; records the texts it ran, in order.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int entered = 0;
  std::vector<std::string> seen;

  void wait_entered(int n) {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kGenerous, [&] { return entered >= n; }));
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  std::vector<std::string> ran() {
    std::lock_guard lock(mu);
    return seen;
  }
};

class GateEngine final : public Engine {
 public:
  explicit GateEngine(Gate& g) : g_(g) {}
  Status load() override { return {}; }
  void run_batch(std::span<const RequestPtr> batch) override {
    {
      std::unique_lock lock(g_.mu);
      ++g_.entered;
      for (const RequestPtr& r : batch) g_.seen.push_back(dynamic_cast<EchoPayload&>(*r->input).text);
      g_.cv.notify_all();
      g_.cv.wait(lock, [&] { return g_.open; });
    }
    for (const RequestPtr& r : batch) r->complete(std::move(r->input));
  }

 private:
  Gate& g_;
};

EngineFactory gate_factory(Gate& g) {
  return [&g](const EngineContext&) -> Result<std::unique_ptr<Engine>> {
    return std::unique_ptr<Engine>(std::make_unique<GateEngine>(g));
  };
}

DeploymentConfig echo_config(const std::string& name = "echo") {
  DeploymentConfig c;
  c.name = name;
  c.task = "echo";
  return c;
}

RequestPtr make(Collector& col, const std::string& text, Lane lane = Lane::online) {
  RequestPtr r = make_request(std::make_unique<EchoPayload>(text), col.completion(text));
  r->lane = lane;
  return r;
}

// A started deployment with one gated replica running batches of one, and the request
// "first" already inside the engine.
struct GatedDeployment {
  GatedDeployment(Collector& col, DeploymentConfig cfg = echo_config())
      : d(adjust(std::move(cfg)), gate_factory(gate), metrics) {
    d.start();
    EXPECT_TRUE(d.wait_ready().ok());
    EXPECT_TRUE(d.submit(make(col, "first")).ok());
    gate.wait_entered(1);
  }
  static DeploymentConfig adjust(DeploymentConfig c) {
    c.batching.max_batch_size = 1;
    return c;
  }
  Gate gate;
  MetricsRegistry metrics;
  Deployment d;
};

TEST(Deployment, ManyProducersExactlyOnceWithinLimits) {
  auto stats = std::make_shared<EchoStats>();
  DeploymentConfig cfg = echo_config();
  cfg.replicas = 2;
  cfg.batching.max_batch_size = 8;
  cfg.batching.max_batch_tokens = 40;
  cfg.batching.queue_capacity = 100000;
  cfg.knobs.set("delay_us", int64_t{200});
  MetricsRegistry metrics;
  Deployment d(cfg, echo_engine_factory(stats), metrics);
  d.start();
  ASSERT_TRUE(d.wait_ready().ok());

  constexpr int kThreads = 4, kPerThread = 400;
  Collector col;
  std::vector<std::thread> producers;
  std::atomic<int> rejected{0};
  for (int t = 0; t < kThreads; ++t)
    producers.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kPerThread; ++i) {
        std::string key = std::to_string(t) + "/" + std::to_string(i);
        RequestPtr r = make(col, key, i % 3 == 0 ? Lane::bulk : Lane::online);
        r->cost_tokens = 1 + static_cast<int64_t>(rng() % 10);
        if (!d.submit(r).ok()) ++rejected;
      }
    });
  for (auto& p : producers) p.join();
  ASSERT_EQ(rejected.load(), 0);
  ASSERT_TRUE(col.wait_total(kThreads * kPerThread));
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i) {
      std::string key = std::to_string(t) + "/" + std::to_string(i);
      Collector::Entry e = col.get(key);
      EXPECT_EQ(e.calls, 1) << key;
      EXPECT_TRUE(e.status.ok()) << key << " " << e.status.to_string();
      EXPECT_EQ(e.text, key);
    }
  std::vector<int> sizes = stats->batch_sizes();
  std::vector<int64_t> tokens = stats->batch_tokens();
  int64_t sum = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_GE(sizes[i], 1);
    EXPECT_LE(sizes[i], 8);
    EXPECT_LE(tokens[i], 40);
    sum += sizes[i];
  }
  EXPECT_EQ(sum, kThreads * kPerThread);
  d.stop();
  EXPECT_EQ(col.total(), kThreads * kPerThread);  // nothing completed twice during stop

  std::string text = metrics.render();
  EXPECT_NE(text.find("prism_requests_total{deployment=\"echo\",modality=\"test\",status=\"ok\"} 1600\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prism_request_seconds_count{deployment=\"echo\",modality=\"test\"} 1600\n"), std::string::npos);
  EXPECT_NE(text.find("prism_queue_seconds_count{deployment=\"echo\",modality=\"test\"} 1600\n"), std::string::npos);
  EXPECT_NE(text.find("prism_batch_size_count{deployment=\"echo\",modality=\"test\"} " +
                      std::to_string(sizes.size()) + "\n"),
            std::string::npos);
  EXPECT_NE(text.find("prism_running_requests{deployment=\"echo\",modality=\"test\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("prism_queue_depth{deployment=\"echo\",modality=\"test\"} 0\n"), std::string::npos);
}

TEST(Deployment, CancelledRequestsAreSkipped) {
  Collector col;
  GatedDeployment g(col);
  RequestPtr a = make(col, "a"), b = make(col, "b"), c = make(col, "c");
  for (auto& r : {a, b, c}) ASSERT_TRUE(g.d.submit(r).ok());
  b->cancel();
  g.gate.release();
  ASSERT_TRUE(col.wait_total(4));
  EXPECT_TRUE(col.get("b").status.code() == StatusCode::cancelled);
  EXPECT_EQ(col.get("b").calls, 1);
  EXPECT_TRUE(col.get("a").status.ok());
  EXPECT_TRUE(col.get("c").status.ok());
  EXPECT_EQ(g.gate.ran(), (std::vector<std::string>{"first", "a", "c"}));
  g.d.stop();
  EXPECT_NE(g.metrics.render().find("status=\"cancelled\"} 1\n"), std::string::npos);
}

TEST(Deployment, DeadlinesExpireInsteadOfRunning) {
  Collector col;
  GatedDeployment g(col);
  RequestPtr late = make(col, "late"), fine = make(col, "fine");
  late->deadline = Clock::now() - std::chrono::milliseconds(1);
  ASSERT_TRUE(g.d.submit(late).ok());
  ASSERT_TRUE(g.d.submit(fine).ok());
  g.gate.release();
  ASSERT_TRUE(col.wait_total(3));
  EXPECT_TRUE(col.get("late").status.code() == StatusCode::deadline_exceeded) << col.get("late").status.to_string();
  EXPECT_TRUE(col.get("fine").status.ok());
  EXPECT_EQ(g.gate.ran(), (std::vector<std::string>{"first", "fine"}));
  g.d.stop();
  EXPECT_NE(g.metrics.render().find("status=\"deadline_exceeded\"} 1\n"), std::string::npos);
}

TEST(Deployment, SubmitAppliesTheDeploymentTimeout) {
  Collector col;
  DeploymentConfig cfg = echo_config();
  cfg.timeout_ms = 1000;
  GatedDeployment g(col, cfg);
  RequestPtr r = make(col, "r");
  const auto before = Clock::now();
  ASSERT_TRUE(g.d.submit(r).ok());
  EXPECT_LE(r->deadline, Clock::now() + std::chrono::milliseconds(1000));
  EXPECT_GE(r->deadline, before + std::chrono::milliseconds(1000));
  g.gate.release();
  ASSERT_TRUE(col.wait_total(2));
}

TEST(Deployment, OnlineLaneFirst) {
  Collector col;
  GatedDeployment g(col);
  for (const char* t : {"b1", "b2"}) ASSERT_TRUE(g.d.submit(make(col, t, Lane::bulk)).ok());
  for (const char* t : {"o1", "o2"}) ASSERT_TRUE(g.d.submit(make(col, t, Lane::online)).ok());
  g.gate.release();
  ASSERT_TRUE(col.wait_total(5));
  EXPECT_EQ(g.gate.ran(), (std::vector<std::string>{"first", "o1", "o2", "b1", "b2"}));
}

TEST(Deployment, LanesDisabledIsFifo) {
  Collector col;
  DeploymentConfig cfg = echo_config();
  cfg.priority_lanes = false;
  GatedDeployment g(col, cfg);
  for (const char* t : {"b1", "b2"}) ASSERT_TRUE(g.d.submit(make(col, t, Lane::bulk)).ok());
  for (const char* t : {"o1", "o2"}) ASSERT_TRUE(g.d.submit(make(col, t, Lane::online)).ok());
  g.gate.release();
  ASSERT_TRUE(col.wait_total(5));
  EXPECT_EQ(g.gate.ran(), (std::vector<std::string>{"first", "b1", "b2", "o1", "o2"}));
}

TEST(Deployment, FullQueueAnswersResourceExhausted) {
  Collector col;
  DeploymentConfig cfg = echo_config();
  cfg.batching.queue_capacity = 3;
  GatedDeployment g(col, cfg);
  for (const char* t : {"a", "b", "c"}) ASSERT_TRUE(g.d.submit(make(col, t)).ok());
  Status s = g.d.submit(make(col, "over"));
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted);
  EXPECT_EQ(g.d.info().queue_depth, 3u);
  EXPECT_EQ(g.d.info().running, 1);
  g.gate.release();
  ASSERT_TRUE(col.wait_total(4));
  g.d.stop();
  EXPECT_EQ(col.get("over").calls, 0);  // refused requests never complete
  EXPECT_EQ(col.total(), 4);
  EXPECT_NE(g.metrics.render().find("status=\"rejected\"} 1\n"), std::string::npos);
}

TEST(Deployment, StopDrainsEverything) {
  auto stats = std::make_shared<EchoStats>();
  DeploymentConfig cfg = echo_config();
  cfg.batching.max_batch_size = 4;
  cfg.knobs.set("delay_us", int64_t{500});
  MetricsRegistry metrics;
  Deployment d(cfg, echo_engine_factory(stats), metrics);
  d.start();
  ASSERT_TRUE(d.wait_ready().ok());
  Collector col;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(d.submit(make(col, std::to_string(i))).ok());
  d.stop();
  EXPECT_EQ(col.total(), 50);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(col.get(std::to_string(i)).status.ok());
  EXPECT_EQ(stats->num_requests(), 50);
  EXPECT_EQ(d.submit(make(col, "after")).code(), StatusCode::unavailable);
  EXPECT_EQ(d.info().state, DeploymentState::stopped);
  d.stop();  // idempotent
}

TEST(Deployment, StopPastGraceFailsWaitingRequests) {
  Collector col;
  GatedDeployment g(col);
  for (const char* t : {"w1", "w2"}) ASSERT_TRUE(g.d.submit(make(col, t)).ok());
  std::thread stopper([&] { g.d.stop(std::chrono::milliseconds(0)); });
  // The waiting requests fail during stop, while "first" still runs.
  ASSERT_TRUE(col.wait_total(2));
  EXPECT_EQ(col.get("w1").status.code(), StatusCode::unavailable);
  EXPECT_EQ(col.get("w2").status.code(), StatusCode::unavailable);
  EXPECT_EQ(col.get("first").calls, 0);
  g.gate.release();
  stopper.join();
  EXPECT_TRUE(col.get("first").status.ok());  // a running batch always finishes
  EXPECT_EQ(g.gate.ran(), std::vector<std::string>{"first"});
}

TEST(Deployment, LoadFailureIsReported) {
  DeploymentConfig cfg = echo_config("broken");
  cfg.replicas = 2;
  cfg.knobs.set("fail_load", true);
  MetricsRegistry metrics;
  Deployment d(cfg, echo_engine_factory(), metrics);
  d.start();
  Status s = d.wait_ready();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("broken"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fail_load"), std::string::npos) << s.message();
  DeploymentInfo info = d.info();
  EXPECT_EQ(info.state, DeploymentState::failed);
  EXPECT_FALSE(info.ready);
  EXPECT_FALSE(info.error.empty());
  Collector col;
  EXPECT_EQ(d.submit(make(col, "x")).code(), StatusCode::unavailable);
}

TEST(Deployment, NotStartedIsNotReady) {
  MetricsRegistry metrics;
  Deployment d(echo_config(), echo_engine_factory(), metrics);
  Collector col;
  EXPECT_EQ(d.submit(make(col, "x")).code(), StatusCode::unavailable);
  EXPECT_EQ(d.info().state, DeploymentState::created);
  EXPECT_EQ(d.wait_ready().code(), StatusCode::failed_precondition);  // does not hang
}

// An engine with both bugs: it completes some requests twice and forgets others. The
// framework keeps every completion exactly-once.
class BuggyEngine final : public Engine {
 public:
  Status load() override { return {}; }
  void run_batch(std::span<const RequestPtr> batch) override {
    for (const RequestPtr& r : batch) {
      if (dynamic_cast<EchoPayload&>(*r->input).text == "forget") continue;
      r->complete(std::move(r->input));
      EXPECT_FALSE(r->complete(internal_error("second completion is ignored")));
    }
  }
};

class ThrowingEngine final : public Engine {
 public:
  Status load() override { return {}; }
  void run_batch(std::span<const RequestPtr>) override { throw std::runtime_error("boom"); }
};

TEST(Deployment, EngineBugsStillCompleteOnce) {
  MetricsRegistry metrics;
  Collector col;
  {
    Deployment d(echo_config("buggy"),
                 EngineFactory([](const EngineContext&) -> Result<std::unique_ptr<Engine>> {
                   return std::unique_ptr<Engine>(std::make_unique<BuggyEngine>());
                 }),
                 metrics);
    d.start();
    ASSERT_TRUE(d.wait_ready().ok());
    ASSERT_TRUE(d.submit(make(col, "twice")).ok());
    ASSERT_TRUE(d.submit(make(col, "forget")).ok());
    ASSERT_TRUE(col.wait_total(2));
    d.stop();
  }
  EXPECT_EQ(col.get("twice").calls, 1);
  EXPECT_TRUE(col.get("twice").status.ok());
  EXPECT_EQ(col.get("forget").calls, 1);
  EXPECT_EQ(col.get("forget").status.code(), StatusCode::internal);
  {
    Deployment d(echo_config("throwing"),
                 EngineFactory([](const EngineContext&) -> Result<std::unique_ptr<Engine>> {
                   return std::unique_ptr<Engine>(std::make_unique<ThrowingEngine>());
                 }),
                 metrics);
    d.start();
    ASSERT_TRUE(d.wait_ready().ok());
    ASSERT_TRUE(d.submit(make(col, "t")).ok());
    ASSERT_TRUE(col.wait_total(3));
  }
  EXPECT_EQ(col.get("t").calls, 1);
  EXPECT_EQ(col.get("t").status.code(), StatusCode::internal);
  EXPECT_NE(col.get("t").status.message().find("boom"), std::string::npos);
}

TEST(Deployment, EchoPerRequestError) {
  MetricsRegistry metrics;
  Deployment d(echo_config(), echo_engine_factory(), metrics);
  d.start();
  ASSERT_TRUE(d.wait_ready().ok());
  Collector col;
  ASSERT_TRUE(d.submit(make(col, "error:bad input")).ok());
  ASSERT_TRUE(d.submit(make(col, "good")).ok());
  ASSERT_TRUE(col.wait_total(2));
  EXPECT_EQ(col.get("error:bad input").status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(col.get("error:bad input").status.message(), "bad input");
  EXPECT_TRUE(col.get("good").status.ok());
  d.stop();
  EXPECT_NE(metrics.render().find("status=\"invalid_argument\"} 1\n"), std::string::npos);
}

// A generate-style engine: owns its loop, admits with poll() between "steps".
class LoopingEngine final : public Engine {
 public:
  Status load() override { return {}; }
  void serve(BatchSource& src) override {
    std::vector<RequestPtr> running;
    while (true) {
      std::vector<RequestPtr> fresh = running.empty() ? src.next_batch() : src.poll(4 - static_cast<int>(running.size()), 1000);
      if (fresh.empty() && running.empty()) return;
      for (auto& r : fresh) running.push_back(std::move(r));
      // One "step": finish the oldest running request.
      RequestPtr r = running.front();
      running.erase(running.begin());
      r->emit(std::make_unique<EchoPayload>("partial"));
      r->complete(std::move(r->input));
    }
  }
};

TEST(Deployment, EngineThatOwnsItsLoop) {
  MetricsRegistry metrics;
  Deployment d(echo_config("loop"),
               EngineFactory([](const EngineContext&) -> Result<std::unique_ptr<Engine>> {
                 return std::unique_ptr<Engine>(std::make_unique<LoopingEngine>());
               }),
               metrics);
  d.start();
  ASSERT_TRUE(d.wait_ready().ok());
  Collector col;
  std::atomic<int> partials{0};
  for (int i = 0; i < 20; ++i) {
    RequestPtr r = make(col, std::to_string(i));
    r->on_partial = [&](PayloadPtr) { ++partials; };
    ASSERT_TRUE(d.submit(r).ok());
  }
  ASSERT_TRUE(col.wait_total(20));
  d.stop();
  EXPECT_EQ(partials.load(), 20);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(col.get(std::to_string(i)).text, std::to_string(i));
}

TEST(DeploymentSet, FindStartReadyStop) {
  MetricsRegistry metrics;
  DeploymentSet set(metrics);
  EngineFactories engines;
  register_echo_engine(engines);
  Config cfg;
  cfg.deployments = {echo_config("a"), echo_config("b")};
  ASSERT_TRUE(set.add_all(cfg, engines).ok());
  EXPECT_EQ(set.add(echo_config("a"), engines).code(), StatusCode::invalid_argument);
  DeploymentConfig embed = echo_config("e");
  embed.task = "embed";
  Status s = set.add(embed, engines);
  EXPECT_EQ(s.code(), StatusCode::not_found);
  EXPECT_NE(s.message().find("embed"), std::string::npos) << s.message();

  EXPECT_FALSE(set.all_ready());
  set.start_all();
  ASSERT_TRUE(set.wait_ready().ok());
  EXPECT_TRUE(set.all_ready());
  Result<Deployment*> b = set.find("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)->name(), "b");
  Result<Deployment*> missing = set.find("gpt-9");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find("gpt-9"), std::string::npos);

  Collector col;
  ASSERT_TRUE((*b)->submit(make(col, "hi")).ok());
  ASSERT_TRUE(col.wait_total(1));
  EXPECT_EQ(col.get("hi").text, "hi");

  std::vector<DeploymentInfo> infos = set.infos();
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].name, "a");
  EXPECT_EQ(infos[0].task, "echo");
  EXPECT_EQ(infos[0].modality, "test");
  EXPECT_EQ(infos[0].precision, "f32");
  EXPECT_TRUE(infos[0].ready);
  EXPECT_EQ(infos[0].engine["engine"], "echo");
  set.stop_all(std::chrono::milliseconds(1000));
  EXPECT_FALSE(set.all_ready());
  EXPECT_EQ(set.infos()[1].state, DeploymentState::stopped);
}

// A load that fails the way a real one does (a weight-packing error), and an engine that counts
// its destructions, so a test sees failed deployments give their loaded replicas back.
struct EngineCounts {
  std::mutex mu;
  std::condition_variable cv;
  int destroyed = 0;
  bool wait_destroyed(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kGenerous, [&] { return destroyed >= n; });
  }
};

class CountedEngine final : public Engine {
 public:
  CountedEngine(EngineCounts& counts, Status load_status) : counts_(counts), load_status_(std::move(load_status)) {}
  ~CountedEngine() override {
    std::lock_guard lock(counts_.mu);
    ++counts_.destroyed;
    counts_.cv.notify_all();
  }
  Status load() override { return load_status_; }
  void run_batch(std::span<const RequestPtr> batch) override {
    for (const RequestPtr& r : batch) r->complete(std::move(r->input));
  }

 private:
  EngineCounts& counts_;
  Status load_status_;
};

constexpr const char* kPackingError = "oneDNN has no matmul for linear 64->128 in bf16";

// Replicas listed in `failing` fail their load with kPackingError; the others load.
EngineFactory counted_factory(EngineCounts& counts, std::vector<int> failing) {
  return [&counts, failing](const EngineContext& c) -> Result<std::unique_ptr<Engine>> {
    const bool fails = std::find(failing.begin(), failing.end(), c.replica) != failing.end();
    return std::unique_ptr<Engine>(
        std::make_unique<CountedEngine>(counts, fails ? invalid_argument(kPackingError) : Status()));
  };
}

TEST(Deployment, AFailedReplicaStopsTheLoadedOnes) {
  EngineCounts counts;
  MetricsRegistry metrics;
  DeploymentConfig cfg = echo_config("half");
  cfg.replicas = 2;
  Deployment d(cfg, counted_factory(counts, {1}), metrics);
  d.start();
  Status s = d.wait_ready();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), std::string("deployment half replica 1: ") + kPackingError);
  // Without stop(): replica 0 either never serves or leaves its loop when the queue closes.
  ASSERT_TRUE(counts.wait_destroyed(2));
  EXPECT_EQ(d.info().state, DeploymentState::failed);
  EXPECT_EQ(d.load_error().message(), s.message());
  Collector col;
  Status refused = d.submit(make(col, "x"));
  EXPECT_EQ(refused.code(), StatusCode::unavailable);
  EXPECT_NE(refused.message().find(kPackingError), std::string::npos) << refused.message();
  d.stop();
  EXPECT_EQ(col.total(), 0);
}

TEST(Deployment, MarkFailedBeforeStart) {
  MetricsRegistry metrics;
  Deployment d(echo_config("gone"), echo_engine_factory(), metrics);
  d.mark_failed(invalid_argument("prism.toml:7: key 'deployment[0].model': no such model directory '/nope'"));
  d.start();  // does nothing: the deployment is failed
  Status s = d.wait_ready();
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message(), "deployment gone: prism.toml:7: key 'deployment[0].model': no such model directory '/nope'");
  DeploymentInfo info = d.info();
  EXPECT_EQ(info.state, DeploymentState::failed);
  EXPECT_EQ(info.error, s.message());
  EXPECT_TRUE(info.engine.empty());
  Collector col;
  EXPECT_EQ(d.submit(make(col, "x")).code(), StatusCode::unavailable);
  d.stop();
  EXPECT_EQ(d.info().state, DeploymentState::stopped);
}

// A set of three where the middle one's engine fails at load: the others load and serve.
struct SetWithAFailedLoad {
  SetWithAFailedLoad() : set(metrics) {
    EXPECT_TRUE(set.add(echo_config("a"), echo_engine_factory()).ok());
    DeploymentConfig c = echo_config("c");
    c.replicas = 2;
    EXPECT_TRUE(set.add(c, counted_factory(counts, {0, 1})).ok());
    EXPECT_TRUE(set.add(echo_config("b"), echo_engine_factory()).ok());
    set.start_all();
  }
  EngineCounts counts;
  MetricsRegistry metrics;
  DeploymentSet set;
};

TEST(DeploymentSet, AFailedLoadLeavesTheOthersServing) {
  SetWithAFailedLoad t;
  ASSERT_TRUE(t.set.wait_loaded(/*strict=*/false).ok());
  EXPECT_FALSE(t.set.all_ready());

  Collector col;
  for (const char* name : {"a", "b"}) {
    Result<Deployment*> d = t.set.find(name);
    ASSERT_TRUE(d.has_value());
    EXPECT_TRUE((*d)->ready());
    ASSERT_TRUE((*d)->submit(make(col, name)).ok());
  }
  ASSERT_TRUE(col.wait_total(2));
  EXPECT_EQ(col.get("a").text, "a");
  EXPECT_EQ(col.get("b").text, "b");

  // The failed one stays in the set (found by name, listed) with its reason.
  Result<Deployment*> c = t.set.find("c");
  ASSERT_TRUE(c.has_value());
  Status refused = (*c)->submit(make(col, "to-c"));
  EXPECT_EQ(refused.code(), StatusCode::unavailable);
  EXPECT_NE(refused.message().find("model 'c' failed to load"), std::string::npos) << refused.message();
  std::vector<DeploymentInfo> infos = t.set.infos();
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(infos[1].name, "c");
  EXPECT_EQ(infos[1].state, DeploymentState::failed);
  EXPECT_FALSE(infos[1].ready);
  EXPECT_NE(infos[1].error.find("deployment c replica "), std::string::npos) << infos[1].error;
  EXPECT_NE(infos[1].error.find(kPackingError), std::string::npos) << infos[1].error;
  EXPECT_TRUE(infos[0].error.empty());
  EXPECT_TRUE(t.counts.wait_destroyed(2));  // both of c's engines given back
  t.set.stop_all(std::chrono::milliseconds(1000));
  EXPECT_EQ(col.total(), 2);
}

TEST(DeploymentSet, StrictStopsAtAFailedLoad) {
  SetWithAFailedLoad t;
  Status s = t.set.wait_loaded(/*strict=*/true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("deployment c replica "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(kPackingError), std::string::npos) << s.message();
  t.set.stop_all(std::chrono::milliseconds(0));
}

TEST(DeploymentSet, EveryDeploymentFailedIsAnError) {
  MetricsRegistry metrics;
  EngineCounts counts;
  {
    // One deployment: its own error, unchanged (`prism serve --embed DIR` prints it as is).
    DeploymentSet one(metrics);
    ASSERT_TRUE(one.add(echo_config("x"), counted_factory(counts, {0})).ok());
    one.start_all();
    Status s = one.wait_loaded(/*strict=*/false);
    EXPECT_EQ(s.code(), StatusCode::invalid_argument);
    EXPECT_EQ(s.message(), std::string("deployment x replica 0: ") + kPackingError);
  }
  DeploymentSet two(metrics);
  ASSERT_TRUE(two.add(echo_config("x"), counted_factory(counts, {0})).ok());
  DeploymentConfig y = echo_config("y");
  y.knobs.set("fail_load", true);
  ASSERT_TRUE(two.add(y, echo_engine_factory()).ok());
  two.start_all();
  Status s = two.wait_loaded(/*strict=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("every deployment failed to load"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("deployment x replica 0: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("deployment y replica 0: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fail_load"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace prism::serving

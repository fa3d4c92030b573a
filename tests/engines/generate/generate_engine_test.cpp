// The generate engine inside a real serving::Deployment over a fake decoder that reads every
// sequence's context back through the paged KV cache (fake_decoder.h): outputs equal the
// context function (block tables, slots, chunked prefill, batching), prefix-cache hits and
// LRU eviction, preemption under a tiny pool, n > 1 forks sharing the prompt, cancellation
// freeing blocks, stop tokens/strings/eos/max_tokens, streaming deltas, speculative decoding
// exactness and its counters, bad requests and a KV budget too small to load.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "engines/generate/generate_engine_factory.h"
#include "fake_decoder.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "serving/deployment.h"

namespace prism::engines::generate {
namespace {

using serving::Deployment;
using serving::DeploymentConfig;
using serving::MetricsRegistry;
using serving::RequestPtr;
using test::CallGate;
using test::DecodeStats;
using test::FakeDecoder;

constexpr int kBlockSize = 4;
constexpr int64_t kBytesPerBlock = 2 /*layers*/ * 2 /*K, V*/ * kBlockSize * 4 /*f32*/;

// What a request ended with, and what it streamed.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  frontends::GenerateOutput out;
  std::vector<frontends::ChoiceDelta> deltas;  // streamed, in order
  int chunks = 0;

  bool wait() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; });
  }
};

struct EngineSetup {
  int64_t kv_blocks = 64;
  int64_t max_context = 64;
  int64_t max_step_tokens = 16;
  int max_batch_size = 16;
  bool prefix_caching = true;
  std::string speculation = "none";
  int num_speculative_tokens = 4;
  std::string kv_cache_dtype = "auto";
  int32_t poison_token = -1;
  bool set_kv_cache_bytes = true;  // false: the engine's default budget
  std::string extra_knob;          // set to 1 when not empty (an unknown knob)
  test::NextTokenFn next = test::hashed_next_token;
};

struct Fixture {
  explicit Fixture(const std::string& name, EngineSetup s = {}) : next(s.next) {
    DeploymentConfig c;
    c.name = "chat";
    c.task = "chat";
    c.model = test::write_fake_generate_model(name, s.max_context);
    c.precision = "f32";
    c.batching.max_batch_size = s.max_batch_size;
    c.knobs.set("block_size", int64_t(kBlockSize));
    if (s.set_kv_cache_bytes) c.knobs.set("kv_cache_bytes", s.kv_blocks * kBytesPerBlock);
    c.knobs.set("max_step_tokens", s.max_step_tokens);
    c.knobs.set("prefix_caching", s.prefix_caching);
    c.knobs.set("speculation", s.speculation);
    c.knobs.set("num_speculative_tokens", int64_t(s.num_speculative_tokens));
    c.knobs.set("kv_cache_dtype", s.kv_cache_dtype, "chat.toml:7");
    if (!s.extra_knob.empty()) c.knobs.set(s.extra_knob, int64_t(1), "chat.toml:9");
    FakeDecoder::Options o;
    o.max_context = s.max_context;
    o.next = s.next;
    o.stats = stats;
    o.gate = gate;
    o.poison_token = s.poison_token;
    DecoderLoader loader = [o](const DeploymentConfig&, ops::Precision) -> Result<std::unique_ptr<models::Decoder>> {
      return std::unique_ptr<models::Decoder>(std::make_unique<FakeDecoder>(o));
    };
    d = std::make_unique<Deployment>(
        c, serving::EngineKind(generate_engine_factory(loader), generate_frontend_factory()), metrics);
    d->start();
    load_status = d->wait_ready();
    base_tokens = stats->tokens.load();
  }
  ~Fixture() {
    gate->open();
    d->stop();
  }
  const frontends::GenerateFrontend& frontend() const { return dynamic_cast<const frontends::GenerateFrontend&>(*d->frontend()); }

  std::shared_ptr<Outcome> submit(std::vector<int32_t> prompt, frontends::SamplingParams sp, bool stream = false,
                                  RequestPtr* handle = nullptr) {
    auto outcome = std::make_shared<Outcome>();
    auto in = std::make_unique<frontends::GenerateInput>();
    in->prompt = std::move(prompt);
    in->sampling = std::move(sp);
    const int64_t cost = int64_t(in->prompt.size());
    RequestPtr r = serving::make_request(std::move(in), [outcome](Result<serving::PayloadPtr> res) {
      std::lock_guard lock(outcome->mu);
      outcome->status = res.status();
      if (res.has_value())
        if (auto* o = dynamic_cast<frontends::GenerateOutput*>(res.value().get())) outcome->out = std::move(*o);
      outcome->done = true;
      outcome->cv.notify_all();
    });
    r->cost_tokens = std::max<int64_t>(cost, 1);
    if (stream)
      r->on_partial = [outcome](serving::PayloadPtr p) {
        std::lock_guard lock(outcome->mu);
        ++outcome->chunks;
        if (auto* c = dynamic_cast<frontends::GenerateChunk*>(p.get()))
          for (frontends::ChoiceDelta& dl : c->deltas) outcome->deltas.push_back(std::move(dl));
      };
    if (handle) *handle = r;
    const Status st = d->submit(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return outcome;
  }

  // The value of a series of this deployment in the /metrics text.
  double metric(const std::string& name) const {
    std::istringstream text(metrics.render());
    for (std::string line; std::getline(text, line);)
      if (line.starts_with(name + "{")) return std::stod(line.substr(line.rfind(' ') + 1));
    ADD_FAILURE() << "no metric " << name;
    return -1;
  }
  std::string decode(const std::vector<int32_t>& ids) const { return *frontend().tokenizer().decode(ids, true); }

  test::NextTokenFn next;
  std::shared_ptr<DecodeStats> stats = std::make_shared<DecodeStats>();
  std::shared_ptr<CallGate> gate = std::make_shared<CallGate>();
  MetricsRegistry metrics;
  std::unique_ptr<Deployment> d;
  Status load_status;
  int64_t base_tokens = 0;
};

std::vector<int32_t> make_prompt(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = int32_t(300 + rng() % 1000);
  return p;
}

frontends::SamplingParams greedy(int max_tokens) {
  frontends::SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  return sp;
}

// Checks a finished greedy choice against the context function.
void expect_greedy(const Fixture& f, const Outcome& o, const std::vector<int32_t>& prompt, int max_tokens,
                   const std::string& what) {
  ASSERT_TRUE(o.status.ok()) << what << ": " << o.status.to_string();
  ASSERT_FALSE(o.out.choices.empty()) << what;
  const auto expected = test::expected_continuation(prompt, max_tokens, f.next);
  for (const frontends::ChoiceDelta& c : o.out.choices) {
    EXPECT_EQ(c.tokens, expected) << what << " choice " << c.index;
    EXPECT_EQ(c.finish, frontends::FinishReason::length) << what;
    EXPECT_EQ(c.text, f.decode(expected)) << what;
  }
  EXPECT_EQ(o.out.prompt_tokens, int64_t(prompt.size())) << what;
  EXPECT_EQ(o.out.completion_tokens, int64_t(max_tokens) * int64_t(o.out.choices.size())) << what;
}

TEST(GenerateEngine, ConcurrentRequestsMatchTheContextFunctionThroughChunkedPrefill) {
  Fixture f("gen_basic");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const std::vector<int64_t> lengths = {1, 5, 17, 30, 3, 40, 8, 50};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Outcome>> outs;
  f.gate->pause();  // hold the first step so the others join the batch
  for (size_t i = 0; i < lengths.size(); ++i) {
    prompts.push_back(make_prompt(lengths[i], uint32_t(i)));
    outs.push_back(f.submit(prompts.back(), greedy(12)));
    if (i == 0) {
      ASSERT_TRUE(f.gate->wait_entered(2));  // warm-up + the first step
    }
  }
  f.gate->open();
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i]->wait());
    expect_greedy(f, *outs[i], prompts[i], 12, "request " + std::to_string(i));
  }
  EXPECT_LE(f.stats->max_tokens.load(), 16);  // the step budget: long prompts were chunked
  EXPECT_GT(f.stats->max_seqs.load(), 2);     // continuous batching
  EXPECT_EQ(f.metric("prism_generate_generation_tokens_total"), 12.0 * 8);
  EXPECT_EQ(f.metric("prism_generate_prompt_tokens_total"), 154.0);
  EXPECT_EQ(f.metric("prism_generate_sequences_running"), 0.0);
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(f.metric("prism_generate_time_to_first_token_seconds_count"), 8.0);
  const nlohmann::json info = f.d->info().engine;
  EXPECT_EQ(info["kv_blocks"], 64);
  EXPECT_EQ(info["block_size"], kBlockSize);
  EXPECT_EQ(info["kv_token_capacity"], 256);
  EXPECT_EQ(info["kv_cache_dtype"], "f32");
  EXPECT_EQ(info["max_context"], 64);
}

// Without kv_cache_bytes the budget is 256 MiB, grown to one full-context sequence when that
// is more (a real model's 128k context), so `prism serve --chat DIR` loads without a config.
TEST(GenerateEngine, DefaultKvBudgetHoldsOneFullContextSequence) {
  EngineSetup small;
  small.set_kv_cache_bytes = false;
  Fixture a("default_budget_small", small);
  ASSERT_TRUE(a.load_status.ok()) << a.load_status.message();
  EXPECT_EQ(a.d->info().engine["kv_cache_bytes"], int64_t(256) << 20);

  EngineSetup large = small;
  large.max_context = int64_t(1) << 25;  // 2^23 blocks of 64 bytes: 512 MiB > 256 MiB
  Fixture b("default_budget_large", large);
  ASSERT_TRUE(b.load_status.ok()) << b.load_status.message();
  const nlohmann::json info = b.d->info().engine;
  EXPECT_EQ(info["kv_token_capacity"], int64_t(1) << 25);
  EXPECT_EQ(info["kv_cache_bytes"], (int64_t(1) << 25) / kBlockSize * kBytesPerBlock);
}

TEST(GenerateEngine, RepeatedPromptHitsThePrefixCache) {
  Fixture f("gen_prefix");
  ASSERT_TRUE(f.load_status.ok());
  const auto prompt = make_prompt(30, 7);
  auto first = f.submit(prompt, greedy(5));
  ASSERT_TRUE(first->wait());
  expect_greedy(f, *first, prompt, 5, "first");
  EXPECT_EQ(first->out.cached_prompt_tokens, 0);
  const int64_t cold = f.stats->tokens.load() - f.base_tokens;
  EXPECT_EQ(cold, 30 + 4);

  auto second = f.submit(prompt, greedy(5));
  ASSERT_TRUE(second->wait());
  expect_greedy(f, *second, prompt, 5, "second");
  // (30 - 1) / 4 = 7 whole blocks: the last prompt token is always recomputed.
  EXPECT_EQ(second->out.cached_prompt_tokens, 28);
  EXPECT_EQ(f.stats->tokens.load() - f.base_tokens - cold, 2 + 4);
  EXPECT_EQ(f.metric("prism_prefix_cache_hit_tokens_total"), 28.0);
  EXPECT_EQ(f.metric("prism_prefix_cache_queried_tokens_total"), 60.0);

  // A prompt sharing its first 13 tokens hits the 3 whole blocks among them.
  auto other = prompt;
  other.resize(13);
  for (int32_t t : make_prompt(10, 99)) other.push_back(t);
  auto third = f.submit(other, greedy(5));
  ASSERT_TRUE(third->wait());
  expect_greedy(f, *third, other, 5, "shared prefix");
  EXPECT_EQ(third->out.cached_prompt_tokens, 12);
}

TEST(GenerateEngine, PrefixCachingOffRecomputesEverything) {
  EngineSetup s;
  s.prefix_caching = false;
  Fixture f("gen_noprefix", s);
  ASSERT_TRUE(f.load_status.ok());
  const auto prompt = make_prompt(30, 7);
  for (int i = 0; i < 2; ++i) {
    auto o = f.submit(prompt, greedy(5));
    ASSERT_TRUE(o->wait());
    expect_greedy(f, *o, prompt, 5, "run");
    EXPECT_EQ(o->out.cached_prompt_tokens, 0);
  }
  EXPECT_EQ(f.stats->tokens.load() - f.base_tokens, 2 * (30 + 4));
}

TEST(GenerateEngine, EvictsTheLeastRecentlyUsedCachedBlocksFromTheTail) {
  EngineSetup s;
  s.kv_blocks = 24;  // one 64-token sequence needs 16
  s.max_step_tokens = 64;
  Fixture f("gen_lru", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const auto a = make_prompt(33, 1), b = make_prompt(33, 2), c = make_prompt(33, 3);
  // Each leaves 8 whole blocks cached (tokens 0..31); 24 blocks hold A and B, C evicts one
  // block of A (the least recently released: A's last).
  for (const auto* p : {&a, &b, &c}) {
    auto o = f.submit(*p, greedy(3));
    ASSERT_TRUE(o->wait());
    expect_greedy(f, *o, *p, 3, "fill");
  }
  auto hb = f.submit(b, greedy(3));
  ASSERT_TRUE(hb->wait());
  expect_greedy(f, *hb, b, 3, "B again");
  EXPECT_EQ(hb->out.cached_prompt_tokens, 32);
  auto ha = f.submit(a, greedy(3));
  ASSERT_TRUE(ha->wait());
  expect_greedy(f, *ha, a, 3, "A again");
  EXPECT_EQ(ha->out.cached_prompt_tokens, 28);
}

void run_preemption(bool prefix_caching, const std::string& speculation) {
  EngineSetup s;
  s.kv_blocks = 16;  // exactly one 64-token sequence
  s.max_step_tokens = 32;
  s.prefix_caching = prefix_caching;
  s.speculation = speculation;
  if (speculation != "none") s.next = test::cyclic_next_token;
  Fixture f("gen_preempt", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Outcome>> outs;
  f.gate->pause();
  for (uint32_t i = 0; i < 6; ++i) {
    prompts.push_back(make_prompt(10 + i, 100 + i));
    outs.push_back(f.submit(prompts.back(), greedy(40)));
    if (i == 0) {
      ASSERT_TRUE(f.gate->wait_entered(2));
    }
  }
  f.gate->open();
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i]->wait());
    expect_greedy(f, *outs[i], prompts[i], 40, "request " + std::to_string(i));
  }
  EXPECT_GT(f.metric("prism_generate_preemptions_total"), 0.0);
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(f.metric("prism_generate_sequences_waiting"), 0.0);
}

TEST(GenerateEngine, PreemptionUnderATinyPoolStillGivesEveryFullOutput) { run_preemption(true, "none"); }
TEST(GenerateEngine, PreemptionWithoutPrefixCaching) { run_preemption(false, "none"); }
TEST(GenerateEngine, PreemptionWithSpeculation) { run_preemption(true, "ngram"); }

TEST(GenerateEngine, ChoicesForkAfterOnePrefillAndCopyTheSharedPartialBlock) {
  Fixture f("gen_fork");
  ASSERT_TRUE(f.load_status.ok());
  const auto prompt = make_prompt(10, 5);  // 2 blocks, the second partial
  frontends::SamplingParams sp;
  sp.n = 3;
  sp.temperature = 1.0f;
  sp.top_k = 2;  // next(context) or the id after it (fake logits 10 and 9)
  sp.seed = 1234;
  sp.max_tokens = 16;
  auto o = f.submit(prompt, sp);
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok()) << o->status.to_string();
  ASSERT_EQ(o->out.choices.size(), 3u);
  std::set<std::vector<int32_t>> distinct;
  for (size_t c = 0; c < 3; ++c) {
    const frontends::ChoiceDelta& ch = o->out.choices[c];
    EXPECT_EQ(ch.index, int(c));
    ASSERT_EQ(ch.tokens.size(), 16u);
    // Every token follows from this choice's own context: its blocks were copied on write.
    std::vector<int32_t> ctx = prompt;
    for (int32_t t : ch.tokens) {
      const int32_t want = f.next(ctx);
      EXPECT_TRUE(t == want || t == want + 1) << "choice " << c << " at " << ctx.size();
      ctx.push_back(t);
    }
    distinct.insert(ch.tokens);
  }
  EXPECT_GT(distinct.size(), 1u);
  // The prompt was computed once; each choice then computed 15 tokens.
  EXPECT_EQ(f.stats->tokens.load() - f.base_tokens, 10 + 3 * 15);
  EXPECT_EQ(o->out.completion_tokens, 48);
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);

  // Same seed, same choices.
  auto again = f.submit(prompt, sp);
  ASSERT_TRUE(again->wait());
  for (size_t c = 0; c < 3; ++c) EXPECT_EQ(again->out.choices[c].tokens, o->out.choices[c].tokens);

  // Greedy choices are all the greedy continuation.
  frontends::SamplingParams g = greedy(9);
  g.n = 2;
  auto og = f.submit(make_prompt(8, 6), g);
  ASSERT_TRUE(og->wait());
  expect_greedy(f, *og, make_prompt(8, 6), 9, "greedy n=2");
}

TEST(GenerateEngine, CancellationFreesTheBlocksAtOnce) {
  Fixture f("gen_cancel");
  ASSERT_TRUE(f.load_status.ok());
  f.gate->pause();
  RequestPtr r;
  auto o = f.submit(make_prompt(20, 3), greedy(40), false, &r);
  f.gate->step();
  f.gate->step();
  ASSERT_TRUE(f.gate->wait_entered(4));  // warm-up, two steps done, the third waiting
  EXPECT_GT(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  r->cancel();
  f.gate->open();
  ASSERT_TRUE(o->wait());
  EXPECT_EQ(o->status.code(), StatusCode::cancelled);
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(f.metric("prism_generate_sequences_running"), 0.0);
  // The engine goes on serving.
  const auto p = make_prompt(6, 4);
  auto next = f.submit(p, greedy(4));
  ASSERT_TRUE(next->wait());
  expect_greedy(f, *next, p, 4, "after cancel");
}

TEST(GenerateEngine, AnExpiredDeadlineEndsARunningRequest) {
  Fixture f("gen_deadline");
  ASSERT_TRUE(f.load_status.ok());
  f.gate->pause();
  RequestPtr r;
  auto o = std::make_shared<Outcome>();
  {
    auto in = std::make_unique<frontends::GenerateInput>();
    in->prompt = make_prompt(12, 3);
    in->sampling = greedy(40);
    r = serving::make_request(std::move(in), [o](Result<serving::PayloadPtr> res) {
      std::lock_guard lock(o->mu);
      o->status = res.status();
      o->done = true;
      o->cv.notify_all();
    });
  }
  r->cost_tokens = 12;
  r->deadline = serving::Clock::now() + std::chrono::milliseconds(300);
  ASSERT_TRUE(f.d->submit(r).ok());
  // Held in its first step (or, on a slow machine, still queued) until the deadline passed:
  // either way it must end deadline_exceeded with its blocks freed.
  std::this_thread::sleep_until(r->deadline + std::chrono::milliseconds(50));
  f.gate->open();
  ASSERT_TRUE(o->wait());
  EXPECT_EQ(o->status.code(), StatusCode::deadline_exceeded);
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(f.metric("prism_generate_sequences_running"), 0.0);
}

TEST(GenerateEngine, ShutdownPastTheGraceCompletesRunningRequestsUnavailable) {
  EngineSetup s;
  s.max_batch_size = 1;  // the second request stays in the deployment's queue
  Fixture f("gen_abort", s);
  ASSERT_TRUE(f.load_status.ok());
  f.gate->pause();
  auto running = f.submit(make_prompt(12, 3), greedy(40));
  ASSERT_TRUE(f.gate->wait_entered(2));
  auto queued = f.submit(make_prompt(5, 4), greedy(4));
  std::thread stopper([&] { f.d->stop(std::chrono::milliseconds(0)); });
  // stop() marks the engine aborting before it completes what still waits in the queue.
  ASSERT_TRUE(queued->wait());
  EXPECT_EQ(queued->status.code(), StatusCode::unavailable);
  f.gate->open();
  stopper.join();
  ASSERT_TRUE(running->wait());
  EXPECT_EQ(running->status.code(), StatusCode::unavailable);
}

TEST(GenerateEngine, StopsOnStopTokensMinTokensAndMaxTokens) {
  Fixture f("gen_stop");
  ASSERT_TRUE(f.load_status.ok());
  const auto prompt = make_prompt(9, 11);
  const auto exp = test::expected_continuation(prompt, 20, f.next);
  const size_t k = 6;
  const size_t first = size_t(std::find(exp.begin(), exp.end(), exp[k]) - exp.begin());
  frontends::SamplingParams sp = greedy(20);
  sp.stop_token_ids = {exp[k]};
  auto o = f.submit(prompt, sp);
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok());
  const frontends::ChoiceDelta& c = o->out.choices[0];
  EXPECT_EQ(c.tokens, std::vector<int32_t>(exp.begin(), exp.begin() + ptrdiff_t(first)));
  EXPECT_EQ(c.finish, frontends::FinishReason::stop);
  EXPECT_EQ(o->out.completion_tokens, int64_t(first) + 1);  // the stop token counts as generated

  // min_tokens past the stop token: it is ignored there (and kept as output).
  sp.min_tokens = int(first) + 1;
  sp.max_tokens = int(first) + 3;
  auto m = f.submit(prompt, sp);
  ASSERT_TRUE(m->wait());
  const auto& mt = m->out.choices[0].tokens;
  ASSERT_GE(mt.size(), first + 1);
  EXPECT_EQ(mt[first], exp[k]);

  // max_tokens: finish length.
  auto l = f.submit(prompt, greedy(3));
  ASSERT_TRUE(l->wait());
  EXPECT_EQ(l->out.choices[0].tokens, std::vector<int32_t>(exp.begin(), exp.begin() + 3));
  EXPECT_EQ(l->out.choices[0].finish, frontends::FinishReason::length);
}

TEST(GenerateEngine, StopStringEndsTheTextBeforeIt) {
  Fixture f("gen_stopstr");
  ASSERT_TRUE(f.load_status.ok());
  const auto prompt = make_prompt(9, 12);
  const auto exp = test::expected_continuation(prompt, 24, f.next);
  const std::string text = f.decode(exp);
  const std::string stop = text.substr(text.size() / 2, 3);
  frontends::SamplingParams sp = greedy(24);
  sp.stop = {stop};
  auto o = f.submit(prompt, sp, /*stream=*/true);
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok());
  EXPECT_EQ(o->out.choices[0].text, text.substr(0, text.find(stop)));
  EXPECT_EQ(o->out.choices[0].finish, frontends::FinishReason::stop);
  std::string streamed;
  for (const frontends::ChoiceDelta& d : o->deltas) streamed += d.text;
  EXPECT_EQ(streamed, o->out.choices[0].text);
}

TEST(GenerateEngine, EndOfSequenceStopsUnlessIgnored) {
  EngineSetup s;
  s.next = [](std::span<const int32_t> ctx) -> int32_t {
    return ctx.size() == 12 ? 50256 : test::hashed_next_token(ctx);  // eos as the 4th output token
  };
  Fixture f("gen_eos", s);
  ASSERT_TRUE(f.load_status.ok());
  const auto prompt = make_prompt(9, 13);
  auto o = f.submit(prompt, greedy(8));
  ASSERT_TRUE(o->wait());
  const auto exp = test::expected_continuation(prompt, 8, f.next);
  EXPECT_EQ(o->out.choices[0].tokens, std::vector<int32_t>(exp.begin(), exp.begin() + 3));
  EXPECT_EQ(o->out.choices[0].finish, frontends::FinishReason::stop);
  EXPECT_EQ(o->out.completion_tokens, 4);
  frontends::SamplingParams sp = greedy(8);
  sp.ignore_eos = true;
  auto i = f.submit(prompt, sp);
  ASSERT_TRUE(i->wait());
  EXPECT_EQ(i->out.choices[0].tokens, exp);
  EXPECT_EQ(i->out.choices[0].finish, frontends::FinishReason::length);
}

TEST(GenerateEngine, StreamedDeltasAddUpToTheOutput) {
  Fixture f("gen_stream");
  ASSERT_TRUE(f.load_status.ok());
  frontends::SamplingParams sp = greedy(10);
  sp.n = 2;
  sp.logprobs = true;
  sp.top_logprobs = 2;
  const auto prompt = make_prompt(7, 21);
  auto o = f.submit(prompt, sp, /*stream=*/true);
  ASSERT_TRUE(o->wait());
  expect_greedy(f, *o, prompt, 10, "stream");
  for (int c = 0; c < 2; ++c) {
    std::string text;
    std::vector<int32_t> tokens;
    size_t logprobs = 0;
    int finishes = 0;
    for (const frontends::ChoiceDelta& d : o->deltas) {
      if (d.index != c) continue;
      EXPECT_EQ(finishes, 0) << "a delta after the finishing one";
      text += d.text;
      tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
      logprobs += d.logprobs.size();
      finishes += d.finish ? 1 : 0;
    }
    EXPECT_EQ(text, o->out.choices[size_t(c)].text);
    EXPECT_EQ(tokens, o->out.choices[size_t(c)].tokens);
    EXPECT_EQ(logprobs, 10u);
    EXPECT_EQ(finishes, 1);
    ASSERT_EQ(o->out.choices[size_t(c)].logprobs.size(), 10u);
    // The fake's peak is the chosen token, its neighbour the runner-up.
    const frontends::TokenLogprobs& lp = o->out.choices[size_t(c)].logprobs[0];
    EXPECT_EQ(lp.chosen.token, o->out.choices[size_t(c)].tokens[0]);
    ASSERT_EQ(lp.top.size(), 2u);
    EXPECT_EQ(lp.top[0].token, lp.chosen.token);
    EXPECT_EQ(lp.top[1].token, lp.chosen.token + 1);
  }
  EXPECT_GE(o->chunks, 10);  // one per step
}

TEST(GenerateEngine, SpeculationIsExactAndCountsAcceptance) {
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 5; ++i) prompts.push_back(make_prompt(6 + 3 * i, 50 + i));
  int64_t forwards[2] = {0, 0};
  for (int spec = 0; spec < 2; ++spec) {
    EngineSetup s;
    s.next = test::cyclic_next_token;
    s.speculation = spec ? "ngram" : "none";
    Fixture f(spec ? "gen_spec_on" : "gen_spec_off", s);
    ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
    const int64_t before = f.stats->forwards.load();
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto o = f.submit(prompts[i], greedy(30));
      ASSERT_TRUE(o->wait());
      expect_greedy(f, *o, prompts[i], 30, std::string(spec ? "spec " : "plain ") + std::to_string(i));
    }
    forwards[spec] = f.stats->forwards.load() - before;
    if (spec) {
      const double drafted = f.metric("prism_spec_draft_tokens_total");
      const double accepted = f.metric("prism_spec_accepted_tokens_total");
      EXPECT_GT(accepted, 0.0);
      EXPECT_GE(drafted, accepted);
      EXPECT_EQ(f.metric("prism_generate_generation_tokens_total"), 150.0);
    } else {
      EXPECT_EQ(f.metric("prism_spec_draft_tokens_total"), 0.0);
    }
  }
  EXPECT_LT(forwards[1], forwards[0]);  // accepted drafts are free decode steps
}

TEST(GenerateEngine, ConcurrentSpeculationWithChunkedPrefillIsExact) {
  EngineSetup s;
  s.next = test::cyclic_next_token;
  s.speculation = "ngram";
  s.max_step_tokens = 8;
  s.max_batch_size = 8;
  Fixture f("gen_spec_conc", s);
  ASSERT_TRUE(f.load_status.ok());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Outcome>> outs;
  f.gate->pause();
  for (uint32_t i = 0; i < 6; ++i) {
    prompts.push_back(make_prompt(3 + 7 * i, 70 + i));
    outs.push_back(f.submit(prompts.back(), greedy(20)));
    if (i == 0) {
      ASSERT_TRUE(f.gate->wait_entered(2));
    }
  }
  f.gate->open();
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i]->wait());
    expect_greedy(f, *outs[i], prompts[i], 20, "request " + std::to_string(i));
  }
  EXPECT_LE(f.stats->max_tokens.load(), 8);
}

struct OtherPayload final : serving::Payload {};

TEST(GenerateEngine, BadRequestsFailAloneWithClearErrors) {
  Fixture f("gen_bad");
  ASSERT_TRUE(f.load_status.ok());
  auto expect_error = [&](std::vector<int32_t> prompt, frontends::SamplingParams sp, StatusCode code, const std::string& text) {
    auto o = f.submit(std::move(prompt), sp);
    ASSERT_TRUE(o->wait());
    EXPECT_EQ(o->status.code(), code) << o->status.to_string();
    EXPECT_NE(o->status.message().find(text), std::string::npos) << o->status.message();
  };
  expect_error({}, greedy(4), StatusCode::invalid_argument, "empty");
  expect_error({1, 2, int32_t(test::kFakeVocab)}, greedy(4), StatusCode::out_of_range, "50257");
  expect_error(make_prompt(64, 1), greedy(4), StatusCode::invalid_argument, "maximum context length is 64");
  frontends::SamplingParams many = greedy(4);
  many.n = 17;
  expect_error({1, 2}, many, StatusCode::invalid_argument, "n must be");

  auto wrong = std::make_shared<Outcome>();
  RequestPtr r = serving::make_request(std::make_unique<OtherPayload>(), [wrong](Result<serving::PayloadPtr> res) {
    std::lock_guard lock(wrong->mu);
    wrong->status = res.status();
    wrong->done = true;
    wrong->cv.notify_all();
  });
  ASSERT_TRUE(f.d->submit(r).ok());
  ASSERT_TRUE(wrong->wait());
  EXPECT_EQ(wrong->status.code(), StatusCode::invalid_argument);

  const auto p = make_prompt(5, 8);
  auto ok = f.submit(p, greedy(3));
  ASSERT_TRUE(ok->wait());
  expect_greedy(f, *ok, p, 3, "after bad ones");
}

TEST(GenerateEngine, AKvBudgetBelowOneFullSequenceIsALoadError) {
  EngineSetup s;
  s.kv_blocks = 10;  // a 64-token context needs 16 blocks of 4
  Fixture f("gen_small", s);
  ASSERT_FALSE(f.load_status.ok());
  const std::string m = f.load_status.message();
  EXPECT_NE(m.find("kv_cache_bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("10 blocks"), std::string::npos) << m;
  EXPECT_NE(m.find("needs 16 blocks"), std::string::npos) << m;
}

TEST(GenerateEngine, BadKnobsAreLoadErrorsNamingTheLine) {
  EngineSetup s;
  s.kv_cache_dtype = "fp8";
  Fixture f("gen_badknob", s);
  ASSERT_FALSE(f.load_status.ok());
  EXPECT_NE(f.load_status.message().find("chat.toml:7: knob 'kv_cache_dtype' must be auto, f32, bf16 or int8"),
            std::string::npos)
      << f.load_status.message();
  EngineSetup t;
  t.speculation = "eagle";
  Fixture g("gen_badknob2", t);
  ASSERT_FALSE(g.load_status.ok());
  EXPECT_NE(g.load_status.message().find("speculation"), std::string::npos) << g.load_status.message();
  EngineSetup u;
  u.max_step_tokens = 8;  // below max_batch_size 16
  Fixture h("gen_badknob3", u);
  ASSERT_FALSE(h.load_status.ok());
  EXPECT_NE(h.load_status.message().find("max_step_tokens' = 8 is below batching.max_batch_size = 16"),
            std::string::npos)
      << h.load_status.message();
}

// A misspelt knob is refused, not ignored (the config would silently lose a setting).
TEST(GenerateEngine, UnknownKnobIsALoadError) {
  EngineSetup s;
  s.extra_knob = "kv_cache_byte";
  Fixture f("gen_unknown_knob", s);
  ASSERT_FALSE(f.load_status.ok());
  EXPECT_NE(f.load_status.message().find("chat.toml:9: unknown knob 'kv_cache_byte' for a chat deployment (known: "),
            std::string::npos)
      << f.load_status.message();
}

// Many requests of every shape through a pool that holds one full sequence: shared prefixes,
// n up to 3, speculation, chunked prefill, random cancellations. Every request that was not
// cancelled gets its exact greedy output; afterwards no block is referenced.
TEST(GenerateEngine, StressTinyPoolEveryShapeStaysExact) {
  EngineSetup s;
  s.kv_blocks = 16;
  s.max_step_tokens = 16;
  s.max_batch_size = 8;
  s.speculation = "ngram";
  s.next = test::cyclic_next_token;
  Fixture f("gen_stress", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  std::mt19937 rng(42);
  const std::vector<std::vector<int32_t>> stems = {make_prompt(20, 1), make_prompt(9, 2), make_prompt(33, 3)};
  struct Job {
    std::vector<int32_t> prompt;
    int n, max_tokens;
    bool cancel;
    RequestPtr request;
    std::shared_ptr<Outcome> outcome;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 40; ++i) {
    Job j;
    const auto& stem = stems[rng() % stems.size()];
    j.prompt.assign(stem.begin(), stem.begin() + ptrdiff_t(1 + rng() % stem.size()));
    for (int32_t t : make_prompt(int64_t(rng() % 8), 1000 + uint32_t(i))) j.prompt.push_back(t);
    j.n = 1 + int(rng() % 3);
    j.max_tokens = 1 + int(rng() % 30);
    j.cancel = rng() % 6 == 0;
    frontends::SamplingParams sp = greedy(j.max_tokens);
    sp.n = j.n;
    j.outcome = f.submit(j.prompt, sp, /*stream=*/i % 2 == 0, &j.request);
    if (j.cancel) j.request->cancel();
    jobs.push_back(std::move(j));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    ASSERT_TRUE(j.outcome->wait()) << i;
    if (j.cancel) {
      EXPECT_TRUE(j.outcome->status.ok() || j.outcome->status.code() == StatusCode::cancelled) << i;
      continue;
    }
    ASSERT_TRUE(j.outcome->status.ok()) << i << ": " << j.outcome->status.to_string();
    const int room = int(64 - int64_t(j.prompt.size()));
    const auto expected = test::expected_continuation(j.prompt, std::min(j.max_tokens, room), f.next);
    ASSERT_EQ(j.outcome->out.choices.size(), size_t(j.n)) << i;
    for (const frontends::ChoiceDelta& c : j.outcome->out.choices) {
      EXPECT_EQ(c.tokens, expected) << "request " << i << " choice " << c.index;
      EXPECT_EQ(c.finish, frontends::FinishReason::length) << i;
    }
  }
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(f.metric("prism_generate_sequences_running"), 0.0);
  EXPECT_EQ(f.metric("prism_generate_sequences_waiting"), 0.0);
  EXPECT_GT(f.metric("prism_prefix_cache_hit_tokens_total"), 0.0);
}

TEST(GenerateEngine, ADecoderFailureFailsItsStepAndTheEngineGoesOn) {
  EngineSetup s;
  s.poison_token = 7;
  Fixture f("gen_poison", s);
  ASSERT_TRUE(f.load_status.ok());
  auto bad = f.submit({300, 7, 301}, greedy(4));
  ASSERT_TRUE(bad->wait());
  EXPECT_EQ(bad->status.code(), StatusCode::internal);
  EXPECT_NE(bad->status.message().find("poisoned"), std::string::npos) << bad->status.message();
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  const auto p = make_prompt(6, 9);
  auto good = f.submit(p, greedy(4));
  ASSERT_TRUE(good->wait());
  expect_greedy(f, *good, p, 4, "after a failure");
}

}  // namespace
}  // namespace prism::engines::generate

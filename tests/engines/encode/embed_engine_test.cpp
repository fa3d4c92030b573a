// The embed engine inside a real serving::Deployment: online requests complete with the right
// vectors; a bulk job is cut into chunks and an online request submitted meanwhile completes
// before it (completion order, not time); cancelled bulk work never reaches the model; bad
// payloads fail alone; two replicas both serve, each with its share of the threads; describe()
// and the engine's metrics. Fake encoders behind a gate build the queue states
// deterministically; the last test runs the real tiny MiniLM checkpoint.
#include "engines/encode/embed_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>

#include "fake_encoder.h"
#include "frontends/embed_frontend.h"
#include "frontends/embed_payload.h"
#include "runtime/threads.h"
#include "serving/deployment.h"
#include "serving/echo_engine.h"
#include "test_util/reference_io.h"

namespace prism::engines::encode {
namespace {

using serving::Deployment;
using serving::DeploymentConfig;
using serving::Lane;
using serving::MetricsRegistry;
using serving::RequestPtr;
using test::CallGate;
using test::EncodeLog;
using test::FakeEncoder;

constexpr int64_t kHidden = 16;

// Completions by key, in the order they happened.
class Collector {
 public:
  serving::Completion completion(const std::string& key) {
    return [this, key](Result<serving::PayloadPtr> r) {
      std::lock_guard lock(mu_);
      Entry& e = entries_[key];
      ++e.calls;
      e.status = r.status();
      if (r.has_value()) {
        auto* out = dynamic_cast<frontends::EmbedOutput*>(r.value().get());
        if (out) {
          e.dims = out->dims;
          e.vectors = out->vectors;
        }
      }
      order_.push_back(key);
      cv_.notify_all();
    };
  }
  bool wait_total(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return order_.size() >= n; });
  }
  struct Entry {
    int calls = 0;
    Status status;
    int64_t dims = 0;
    std::vector<float> vectors;
  };
  Entry get(const std::string& key) {
    std::lock_guard lock(mu_);
    return entries_[key];
  }
  std::vector<std::string> order() {
    std::lock_guard lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
};

// A deployment of the embed engine over fake encoders that share one log and one gate.
struct FakeDeployment {
  explicit FakeDeployment(const std::string& name, int replicas = 1, serving::Knobs knobs = {}) {
    DeploymentConfig c;
    c.name = "emb";
    c.task = "embed";
    c.model = test::FakeModelDir{}.write(name);
    c.replicas = replicas;
    c.knobs = std::move(knobs);
    auto loader = [log = log, gate = gate](const frontends::EmbedFrontend& fe,
                                           ops::Precision) -> Result<std::unique_ptr<models::Encoder>> {
      return std::unique_ptr<models::Encoder>(std::make_unique<FakeEncoder>(kHidden, fe.max_tokens(), log, gate));
    };
    d = std::make_unique<Deployment>(c, serving::EngineKind(embed_engine_factory(loader), embed_frontend_factory()),
                                     metrics);
    d->start();
    Status s = d->wait_ready();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ~FakeDeployment() {
    gate->open();
    d->stop();
  }
  const frontends::EmbedFrontend& frontend() const { return dynamic_cast<const frontends::EmbedFrontend&>(*d->frontend()); }

  std::shared_ptr<EncodeLog> log = std::make_shared<EncodeLog>();
  std::shared_ptr<CallGate> gate = std::make_shared<CallGate>();
  MetricsRegistry metrics;
  std::unique_ptr<Deployment> d;
};

RequestPtr embed_request(Collector& col, const std::string& key, std::vector<std::vector<int32_t>> seqs,
                         Lane lane = Lane::online, int64_t dims = 0) {
  auto in = std::make_unique<frontends::EmbedInput>();
  int64_t tokens = 0;
  for (const auto& s : seqs) tokens += int64_t(s.size());
  in->sequences = std::move(seqs);
  in->dims = dims;
  RequestPtr r = serving::make_request(std::move(in), col.completion(key));
  r->lane = lane;
  r->cost_tokens = tokens;
  return r;
}

// n documents of `len` tokens whose ids start at `base` (distinct per request).
std::vector<std::vector<int32_t>> docs(int n, int len, int32_t base) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> s = {101};
    for (int t = 0; t < len - 2; ++t) s.push_back(base + (i * 7 + t) % 50);
    s.push_back(102);
    out.push_back(std::move(s));
  }
  return out;
}

void expect_vectors(const Collector::Entry& e, const std::vector<std::vector<int32_t>>& seqs, int64_t dims,
                    bool normalize) {
  ASSERT_TRUE(e.status.ok()) << e.status.to_string();
  ASSERT_EQ(e.dims, dims);
  ASSERT_EQ(e.vectors.size(), seqs.size() * size_t(dims));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto want = test::finish_vector(test::fake_pooled(seqs[i], kHidden, false), dims, normalize);
    for (int64_t j = 0; j < dims; ++j) ASSERT_NEAR(e.vectors[i * size_t(dims) + size_t(j)], want[size_t(j)], 1e-5);
  }
}

bool contains_id(const test::EncodeCall& c, int32_t id) {
  for (const auto& s : c.seqs)
    if (std::find(s.begin(), s.end(), id) != s.end()) return true;
  return false;
}

TEST(EmbedEngine, OnlineRequestCompletes) {
  serving::Knobs knobs;
  knobs.set("normalize", true);
  FakeDeployment f("eng_online", 1, knobs);
  Collector col;
  const auto seqs = docs(3, 9, 3000);
  ASSERT_TRUE(f.d->submit(embed_request(col, "q", seqs)).ok());
  ASSERT_TRUE(f.d->submit(embed_request(col, "q8", seqs, Lane::online, 8)).ok());
  ASSERT_TRUE(col.wait_total(2));
  expect_vectors(col.get("q"), seqs, kHidden, true);
  expect_vectors(col.get("q8"), seqs, 8, true);
  EXPECT_EQ(col.get("q").calls, 1);
}

TEST(EmbedEngine, OnlineRequestOvertakesARunningBulkJob) {
  serving::Knobs knobs;
  knobs.set("bulk_chunk_tokens", int64_t{32});
  FakeDeployment f("eng_overtake", 1, knobs);
  ASSERT_EQ(f.log->snapshot().size(), 1u);  // the warm-up
  Collector col;
  const auto bulk = docs(60, 12, 4000);       // 720 tokens: about 23 chunks of 32
  const auto online = docs(1, 5, 9000);
  f.gate->pause();
  ASSERT_TRUE(f.d->submit(embed_request(col, "bulk", bulk, Lane::bulk)).ok());
  ASSERT_TRUE(f.gate->wait_entered(2));       // the first bulk chunk is in the model
  ASSERT_TRUE(f.d->submit(embed_request(col, "online", online)).ok());
  f.gate->open();
  ASSERT_TRUE(col.wait_total(2));
  EXPECT_EQ(col.order(), (std::vector<std::string>{"online", "bulk"}));
  expect_vectors(col.get("online"), online, kHidden, false);
  expect_vectors(col.get("bulk"), bulk, kHidden, false);

  // The online request ran right after the first chunk: no more than one chunk held it back.
  const auto calls = f.log->snapshot();
  ASSERT_GE(calls.size(), 4u);
  EXPECT_TRUE(contains_id(calls[1], 4000) || contains_id(calls[1], 4001));
  EXPECT_FALSE(contains_id(calls[1], 9000));
  ASSERT_EQ(calls[2].seqs.size(), 1u);
  EXPECT_EQ(calls[2].seqs[0], online[0]);
  int64_t bulk_docs = 0;
  for (size_t i = 1; i < calls.size(); ++i) {
    if (i == 2) continue;
    int64_t tokens = 0;
    for (const auto& s : calls[i].seqs) tokens += int64_t(s.size());
    EXPECT_LT(tokens, 32 + 12) << "chunk " << i;  // a chunk stops once it holds 32 tokens
    bulk_docs += int64_t(calls[i].seqs.size());
  }
  EXPECT_EQ(bulk_docs, 60);
}

TEST(EmbedEngine, CancelledBulkWorkNeverReachesTheModel) {
  serving::Knobs knobs;
  knobs.set("bulk_chunk_tokens", int64_t{1});  // one document per chunk
  FakeDeployment f("eng_cancel", 1, knobs);
  Collector col;
  const auto a = docs(6, 6, 5000);
  const auto b = docs(4, 6, 7000);
  f.gate->pause();
  ASSERT_TRUE(f.d->submit(embed_request(col, "a", a, Lane::bulk)).ok());
  ASSERT_TRUE(f.gate->wait_entered(2));  // a's first document is in the model
  RequestPtr rb = embed_request(col, "b", b, Lane::bulk);
  ASSERT_TRUE(f.d->submit(rb).ok());
  f.gate->step();                        // a's first chunk ends; the engine polls b in
  ASSERT_TRUE(f.gate->wait_entered(3));  // a's second document: b now waits in the engine
  rb->cancel();
  f.gate->open();
  ASSERT_TRUE(col.wait_total(2));
  expect_vectors(col.get("a"), a, kHidden, false);
  EXPECT_EQ(col.get("b").status.code(), StatusCode::cancelled);
  EXPECT_EQ(col.get("b").calls, 1);
  for (const auto& c : f.log->snapshot())
    for (int32_t id = 7000; id < 7050; ++id) ASSERT_FALSE(contains_id(c, id)) << "b reached the model";
}

TEST(EmbedEngine, BadPayloadsFailAloneWithClearErrors) {
  FakeDeployment f("eng_bad");
  Collector col;
  const auto good = docs(2, 7, 3000);
  f.gate->pause();
  ASSERT_TRUE(f.d->submit(embed_request(col, "first", good)).ok());
  ASSERT_TRUE(f.gate->wait_entered(2));  // the rest queue up and form one batch
  ASSERT_TRUE(f.d->submit(embed_request(col, "vocab", {{101, 102}, {101, 40000, 102}})).ok());
  ASSERT_TRUE(f.d->submit(embed_request(col, "dims", good, Lane::online, 17)).ok());
  ASSERT_TRUE(f.d->submit(embed_request(col, "empty", {})).ok());
  ASSERT_TRUE(f.d->submit(embed_request(col, "long", {std::vector<int32_t>(65, 2000)})).ok());
  ASSERT_TRUE(f.d->submit(serving::make_request(std::make_unique<serving::EchoPayload>("x"), col.completion("echo")))
                  .ok());
  ASSERT_TRUE(f.d->submit(embed_request(col, "good", good)).ok());
  f.gate->open();
  ASSERT_TRUE(col.wait_total(7));
  expect_vectors(col.get("good"), good, kHidden, false);
  expect_vectors(col.get("first"), good, kHidden, false);
  EXPECT_EQ(col.get("vocab").status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(col.get("vocab").status.message(),
            "input[1] has token id 40000 at position 1, outside this model's vocabulary of 30522 ids");
  EXPECT_EQ(col.get("dims").status.message(), "dimensions 17 is more than this model's 16 dimensions");
  EXPECT_EQ(col.get("empty").status.code(), StatusCode::invalid_argument);
  EXPECT_NE(col.get("long").status.message().find("has 65 tokens"), std::string::npos);
  EXPECT_EQ(col.get("echo").status.code(), StatusCode::invalid_argument);
}

TEST(EmbedEngine, TwoReplicasBothServeWithTheirShareOfThreads) {
  const int expected_threads = std::max(1, num_threads() / 2);  // a fresh thread's default, as replicas see it
  FakeDeployment f("eng_replicas", 2);
  ASSERT_EQ(f.log->snapshot().size(), 2u);  // one warm-up per replica
  Collector col;
  const auto q1 = docs(1, 6, 3000), q2 = docs(1, 6, 3100);
  f.gate->pause();
  ASSERT_TRUE(f.d->submit(embed_request(col, "q1", q1)).ok());
  ASSERT_TRUE(f.gate->wait_entered(3));  // one replica holds q1 in its model
  ASSERT_TRUE(f.d->submit(embed_request(col, "q2", q2)).ok());
  ASSERT_TRUE(f.gate->wait_entered(4));  // so the other one took q2
  f.gate->open();
  ASSERT_TRUE(col.wait_total(2));
  expect_vectors(col.get("q1"), q1, kHidden, false);
  expect_vectors(col.get("q2"), q2, kHidden, false);
  const auto calls = f.log->snapshot();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_NE(calls[2].encoder, calls[3].encoder);
  for (const auto& c : calls) EXPECT_EQ(c.omp_threads, expected_threads);
  EXPECT_EQ(f.d->info().engine.value("threads_per_replica", 0), expected_threads);
}

TEST(EmbedEngine, ManyMixedRequestsCompleteExactlyOnce) {
  serving::Knobs knobs;
  knobs.set("bulk_chunk_tokens", int64_t{40});
  knobs.set("normalize", true);
  FakeDeployment f("eng_mixed", 2, knobs);
  Collector col;
  std::map<std::string, std::pair<std::vector<std::vector<int32_t>>, int64_t>> sent;
  for (int i = 0; i < 60; ++i) {
    const std::string key = std::to_string(i) + "r";  // (not "r" + ...: GCC 12 -Wrestrict false positive)
    const auto seqs = docs(1 + i % 7, 3 + i % 20, 2000 + 10 * i);
    const int64_t dims = (i % 3 == 0) ? 8 : 0;
    sent[key] = {seqs, dims ? dims : kHidden};
    ASSERT_TRUE(f.d->submit(embed_request(col, key, seqs, i % 2 ? Lane::bulk : Lane::online, dims)).ok());
  }
  ASSERT_TRUE(col.wait_total(60));
  for (const auto& [key, want] : sent) {
    const Collector::Entry e = col.get(key);
    EXPECT_EQ(e.calls, 1) << key;
    expect_vectors(e, want.first, want.second, true);
  }
}

TEST(EmbedEngine, DescribesItselfAndCountsDocuments) {
  FakeDeployment f("eng_describe");
  Collector col;
  ASSERT_TRUE(f.d->submit(embed_request(col, "a", docs(3, 10, 3000))).ok());
  ASSERT_TRUE(f.d->submit(embed_request(col, "b", docs(2, 5, 3000), Lane::bulk)).ok());
  ASSERT_TRUE(col.wait_total(2));
  const nlohmann::json info = f.d->info().engine;
  EXPECT_EQ(info.value("engine", ""), "embed");
  EXPECT_EQ(info.value("family", ""), "bert");
  EXPECT_EQ(info.value("dims", 0), 16);
  EXPECT_EQ(info.value("max_tokens", 0), 64);
  EXPECT_EQ(info.value("pooling", ""), "mean");
  EXPECT_EQ(info.value("normalize", true), false);
  EXPECT_EQ(info.value("precision", ""), "f32");
  EXPECT_EQ(info.value("embedding_space_id", ""), f.frontend().space_id());
  EXPECT_TRUE(info["matryoshka_dims"].is_array());

  const std::string text = f.metrics.render();
  const std::string labels = "{deployment=\"emb\",modality=\"embeddings\"}";
  EXPECT_NE(text.find("prism_embed_documents_total" + labels + " 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("prism_embed_tokens_total" + labels + " 40\n"), std::string::npos) << text;
  EXPECT_NE(text.find("prism_embed_useful_flops_total" + labels), std::string::npos);
  EXPECT_NE(text.find("prism_embed_padding_ratio_count" + labels + " 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("prism_embed_batch_sequences_sum" + labels + " 5\n"), std::string::npos) << text;
}

TEST(EmbedEngine, RegisteredAsTaskEmbed) {
  serving::EngineFactories factories;
  register_embed_engine(factories);
  auto kind = factories.find("embed");
  ASSERT_TRUE(kind.has_value());
  EXPECT_TRUE(kind->frontend != nullptr);
}

TEST(EmbedEngine, FailedFrontendFailsTheDeployment) {
  DeploymentConfig c;
  c.name = "emb";
  c.task = "embed";
  c.model = test::FakeModelDir{}.write("eng_fail");
  c.knobs.set("colour", std::string("blue"));
  MetricsRegistry metrics;
  serving::EngineFactories factories;
  register_embed_engine(factories);
  Deployment d(c, factories.find("embed").value(), metrics);
  d.start();
  Status s = d.wait_ready();
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("colour"), std::string::npos);
}

// Per-row cosine of two [S, D] row-major float arrays: the lowest.
double min_cosine(const std::vector<float>& a, const Tensor& b) {
  const int64_t rows = b.size(0), d = b.size(1);
  double lowest = 1.0;
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double x = a[size_t(r * d + j)], y = b.data<float>()[r * d + j];
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    lowest = std::min(lowest, dot / std::sqrt(na * nb));
  }
  return lowest;
}

// The tiny MiniLM checkpoint served by two replicas at each precision: f32 vectors equal
// PyTorch's within 1e-4; bf16 and int8 reach the model (their vectors differ from f32) and
// stay close (models/bert's parity test holds the tight bounds; this checks the plumbing).
TEST(EmbedEngineReal, MiniLmThroughADeployment) {
  auto dir = test::generate_reference("bert_family.py", "engine_minilm", "--layout minilm");
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto ref = test::open_reference(*dir);
  ASSERT_TRUE(ref.has_value());
  Tensor ids = (*ref)->get("token_ids").value().to(DType::i32);
  Tensor cu = (*ref)->get("cu_seqlens").value().to(DType::i32);
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t s = 0; s + 1 < cu.size(0); ++s)
    seqs.emplace_back(ids.data<int32_t>() + cu.data<int32_t>()[s], ids.data<int32_t>() + cu.data<int32_t>()[s + 1]);
  Tensor want = (*ref)->get("embeddings").value().to(DType::f32);

  for (const char* precision : {"f32", "bf16", "int8"}) {
    DeploymentConfig c;
    c.name = "emb";
    c.task = "embed";
    c.model = *dir;
    c.replicas = 2;
    c.precision = precision;
    MetricsRegistry metrics;
    serving::EngineFactories factories;
    register_embed_engine(factories);
    Deployment d(c, factories.find("embed").value(), metrics);
    d.start();
    ASSERT_TRUE(d.wait_ready().ok());
    EXPECT_EQ(d.info().engine.value("precision", ""), precision);
    Collector col;
    ASSERT_TRUE(d.submit(embed_request(col, "online", seqs)).ok());
    ASSERT_TRUE(d.submit(embed_request(col, "bulk", seqs, Lane::bulk)).ok());
    ASSERT_TRUE(col.wait_total(2));
    for (const char* key : {"online", "bulk"}) {
      const Collector::Entry e = col.get(key);
      ASSERT_TRUE(e.status.ok()) << e.status.to_string();
      Tensor got = Tensor::from<float>(e.vectors, {int64_t(seqs.size()), e.dims});
      const test::ErrorStats err = test::compare(got, want);
      std::cout << "minilm " << precision << " " << key << ": " << err.to_string() << ", min cosine "
                << min_cosine(e.vectors, want) << "\n";
      if (std::string(precision) == "f32") {
        EXPECT_TRUE(test::rel_error_within(got, want, 1e-4)) << key;
      } else {
        EXPECT_GT(err.max_abs_error, 0.0) << precision << " did not reach the model";
        EXPECT_GE(min_cosine(e.vectors, want), 0.999) << precision << " " << key;
      }
    }
    d.stop();
  }
}

}  // namespace
}  // namespace prism::engines::encode

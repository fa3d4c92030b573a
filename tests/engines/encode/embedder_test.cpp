// Embedder: with a fake encoder (hidden states a known function of each sequence), vectors
// come back in input order, packed equals padded, micro-batches respect the token and
// sequence budgets, dims truncate then re-normalise, and the stats add up. With the tiny
// random checkpoints of tests/reference/bert_family.py (minilm, xlmr), the vectors equal the
// reference embeddings that PyTorch computed.
#include "engines/encode/embedder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>

#include "fake_encoder.h"
#include "test_util/reference_io.h"

namespace prism::engines::encode {
namespace {

using test::EncodeLog;
using test::FakeEncoder;
using test::FakeModelDir;

constexpr int64_t kHidden = 16;

std::shared_ptr<const frontends::EmbedFrontend> frontend(const std::string& name, serving::Knobs knobs = {}) {
  auto fe = frontends::EmbedFrontend::load(FakeModelDir{}.write(name), knobs);
  EXPECT_TRUE(fe.has_value()) << fe.status().to_string();
  return fe.has_value() ? fe.value() : nullptr;
}

std::unique_ptr<Embedder> embedder(std::shared_ptr<const frontends::EmbedFrontend> fe, EmbedderOptions options,
                                   std::shared_ptr<EncodeLog> log = nullptr) {
  auto e = Embedder::create(fe, options, std::make_unique<FakeEncoder>(kHidden, fe->max_tokens(), std::move(log)));
  EXPECT_TRUE(e.has_value()) << e.status().to_string();
  return e.has_value() ? std::move(e).value() : nullptr;
}

// Sequences of mixed lengths (1..max), ids from the vocabulary, shuffled.
std::vector<std::vector<int32_t>> corpus(int n, int64_t max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> seqs;
  for (int i = 0; i < n; ++i) {
    const int64_t len = 1 + int64_t(rng() % uint32_t(max_len));
    std::vector<int32_t> s;
    for (int64_t t = 0; t < len; ++t) s.push_back(int32_t(1000 + rng() % 20000));
    seqs.push_back(std::move(s));
  }
  return seqs;
}

void expect_rows(const std::vector<float>& got, const std::vector<std::vector<int32_t>>& seqs, int64_t dims,
                 bool normalize, bool cls = false, double tol = 1e-5) {
  ASSERT_EQ(got.size(), seqs.size() * size_t(dims));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<float> want = test::finish_vector(test::fake_pooled(seqs[i], kHidden, cls), dims, normalize);
    for (int64_t j = 0; j < dims; ++j)
      ASSERT_NEAR(got[i * size_t(dims) + size_t(j)], want[size_t(j)], tol) << "row " << i << " dim " << j;
  }
}

TEST(Embedder, VectorsComeBackInInputOrder) {
  auto fe = frontend("emb_order");
  ASSERT_TRUE(fe);
  EmbedderOptions o;
  o.max_batch_tokens = 40;  // many micro-batches
  auto log = std::make_shared<EncodeLog>();
  auto e = embedder(fe, o, log);
  const auto seqs = corpus(37, 30, 1);
  expect_rows(e->embed(seqs), seqs, kHidden, /*normalize=*/false);
  EXPECT_GT(log->snapshot().size(), 5u);
}

TEST(Embedder, PackedEqualsPadded) {
  auto fe = frontend("emb_packed");
  ASSERT_TRUE(fe);
  const auto seqs = corpus(50, 64, 2);
  EmbedderOptions packed;
  packed.max_batch_tokens = 300;
  EmbedderOptions padded = packed;
  padded.packed = false;
  auto padded_log = std::make_shared<EncodeLog>();
  const std::vector<float> a = embedder(fe, packed)->embed(seqs);
  const std::vector<float> b = embedder(fe, padded, padded_log)->embed(seqs);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;
  for (const test::EncodeCall& c : padded_log->snapshot()) EXPECT_TRUE(c.padded);
}

TEST(Embedder, MicroBatchesRespectTheBudgets) {
  auto fe = frontend("emb_budget");
  ASSERT_TRUE(fe);
  const auto seqs = corpus(200, 64, 3);
  for (bool packed : {true, false}) {
    EmbedderOptions o;
    o.packed = packed;
    o.max_batch_tokens = 256;
    o.max_batch_sequences = 7;
    auto log = std::make_shared<EncodeLog>();
    EmbedStats stats;
    embedder(fe, o, log)->embed(seqs, 0, &stats);
    int64_t seen = 0, previous_longest = 0;
    for (const test::EncodeCall& c : log->snapshot()) {
      int64_t real = 0, longest = 0, shortest = 1 << 30;
      for (const auto& s : c.seqs) {
        real += int64_t(s.size());
        longest = std::max<int64_t>(longest, int64_t(s.size()));
        shortest = std::min<int64_t>(shortest, int64_t(s.size()));
      }
      EXPECT_LE(c.seqs.size(), 7u);
      EXPECT_LE(c.rows, 256) << "packed " << packed;
      EXPECT_EQ(c.rows, packed ? real : int64_t(c.seqs.size()) * longest);
      EXPECT_GE(shortest, previous_longest);  // sorted by length across micro-batches
      previous_longest = longest;
      seen += int64_t(c.seqs.size());
    }
    EXPECT_EQ(seen, 200);
    EXPECT_EQ(stats.micro_batches, int64_t(log->snapshot().size()));
  }
}

TEST(Embedder, SequenceLongerThanTheBudgetRunsAlone) {
  auto fe = frontend("emb_alone");
  ASSERT_TRUE(fe);
  EmbedderOptions o;
  o.max_batch_tokens = 8;
  auto log = std::make_shared<EncodeLog>();
  const std::vector<std::vector<int32_t>> seqs = {std::vector<int32_t>(20, 2000), {101, 102}, {101, 5, 102}};
  expect_rows(embedder(fe, o, log)->embed(seqs), seqs, kHidden, false);
  const auto calls = log->snapshot();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].seqs.size(), 2u);
  EXPECT_EQ(calls[1].rows, 20);
}

TEST(Embedder, DimsTruncateThenRenormalise) {
  serving::Knobs knobs;
  knobs.set("normalize", true);
  auto fe = frontend("emb_dims", knobs);
  ASSERT_TRUE(fe);
  auto e = embedder(fe, {});
  const auto seqs = corpus(9, 40, 4);
  for (int64_t dims : {int64_t{0}, int64_t{16}, int64_t{8}, int64_t{3}}) {
    const int64_t d = dims ? dims : kHidden;
    const std::vector<float> v = e->embed(seqs, dims);
    expect_rows(v, seqs, d, /*normalize=*/true);
    for (size_t i = 0; i < seqs.size(); ++i) {
      double n = 0;
      for (int64_t j = 0; j < d; ++j) n += double(v[i * size_t(d) + size_t(j)]) * v[i * size_t(d) + size_t(j)];
      EXPECT_NEAR(std::sqrt(n), 1.0, 1e-5) << "dims " << dims;
    }
  }
  // Without normalisation, truncation is a plain prefix.
  auto raw = embedder(frontend("emb_dims_raw"), {});
  const std::vector<float> full = raw->embed(seqs);
  const std::vector<float> cut = raw->embed(seqs, 5);
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t j = 0; j < 5; ++j) EXPECT_FLOAT_EQ(cut[i * 5 + j], full[i * size_t(kHidden) + j]);
}

TEST(Embedder, ClsPooling) {
  serving::Knobs knobs;
  knobs.set("pooling", std::string("cls"));
  auto fe = frontend("emb_cls", knobs);
  ASSERT_TRUE(fe);
  const auto seqs = corpus(12, 30, 5);
  EmbedderOptions padded;
  padded.packed = false;
  expect_rows(embedder(fe, {})->embed(seqs), seqs, kHidden, false, /*cls=*/true);
  expect_rows(embedder(fe, padded)->embed(seqs), seqs, kHidden, false, /*cls=*/true);
}

TEST(Embedder, StatsAddUp) {
  auto fe = frontend("emb_stats");
  ASSERT_TRUE(fe);
  const std::vector<std::vector<int32_t>> seqs = {{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {11}, {12, 13}};
  const int64_t real = 3 + 7 + 1 + 2;
  double flops = 0;
  for (const auto& s : seqs) flops += 1000.0 * double(s.size()) + double(s.size() * s.size());

  EmbedderOptions packed;
  EmbedStats a;
  embedder(fe, packed)->embed(seqs, 0, &a);
  EXPECT_EQ(a.sequences, 4);
  EXPECT_EQ(a.real_tokens, real);
  EXPECT_EQ(a.padded_tokens, real);
  EXPECT_EQ(a.micro_batches, 1);
  EXPECT_DOUBLE_EQ(a.useful_flops, flops);

  // Padded under a budget of 8: sorted 1,2,3,7 → [1,2] (2×2=4; 3×3=9 > 8), [3] (2×7=14 > 8), [7].
  EmbedderOptions padded;
  padded.packed = false;
  padded.max_batch_tokens = 8;
  EmbedStats b;
  auto e = embedder(fe, padded);
  e->embed(seqs, 0, &b);
  EXPECT_EQ(b.sequences, 4);
  EXPECT_EQ(b.real_tokens, real);
  EXPECT_EQ(b.micro_batches, 3);
  EXPECT_EQ(b.padded_tokens, 4 + 3 + 7);
  EXPECT_DOUBLE_EQ(b.useful_flops, flops);
  e->embed(seqs, 0, &b);  // stats accumulate across calls
  EXPECT_EQ(b.sequences, 8);
  EXPECT_EQ(b.micro_batches, 6);
}

TEST(Embedder, EmptyInputGivesNothing) {
  auto fe = frontend("emb_empty");
  ASSERT_TRUE(fe);
  EmbedStats s;
  EXPECT_TRUE(embedder(fe, {})->embed({}, 0, &s).empty());
  EXPECT_EQ(s.micro_batches, 0);
}

TEST(Embedder, RefusesAMismatchedEncoder) {
  auto fe = frontend("emb_mismatch");
  ASSERT_TRUE(fe);
  auto wrong = Embedder::create(fe, {}, std::make_unique<FakeEncoder>(kHidden + 1, 64));
  ASSERT_FALSE(wrong.has_value());
  EXPECT_NE(wrong.status().message().find("17"), std::string::npos);
  EmbedderOptions bad;
  bad.max_batch_tokens = 0;
  EXPECT_FALSE(Embedder::create(fe, bad, std::make_unique<FakeEncoder>(kHidden, 64)).has_value());
}

// ---- real tiny checkpoints ---------------------------------------------------------------

// The reference's input sequences: "token_ids" [T] and "cu_seqlens" [S + 1], flat.
std::vector<std::vector<int32_t>> reference_inputs(const formats::SafetensorsFile& ref) {
  Tensor ids = ref.get("token_ids").value().to(DType::i32);
  Tensor cu = ref.get("cu_seqlens").value().to(DType::i32);
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t s = 0; s + 1 < cu.size(0); ++s)
    seqs.emplace_back(ids.data<int32_t>() + cu.data<int32_t>()[s], ids.data<int32_t>() + cu.data<int32_t>()[s + 1]);
  return seqs;
}

void check_layout(const std::string& layout) {
  auto dir = test::generate_reference("bert_family.py", "embedder_" + layout, "--layout " + layout);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
  auto fe = frontends::EmbedFrontend::load(*dir);
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  auto ref = test::open_reference(*dir);
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  const auto seqs = reference_inputs(**ref);
  ASSERT_FALSE(seqs.empty());
  Tensor want = (*ref)->get("embeddings").value().to(DType::f32);  // [S, H]
  for (bool packed : {true, false}) {
    EmbedderOptions o;
    o.packed = packed;
    o.max_batch_tokens = 24;  // several micro-batches
    auto e = Embedder::load(*fe, o);
    ASSERT_TRUE(e.has_value()) << e.status().to_string();
    std::vector<float> got = (*e)->embed(seqs);
    Tensor got_t = Tensor::from<float>(got, {int64_t(seqs.size()), (*fe)->dims()});
    std::cout << layout << (packed ? " packed: " : " padded: ") << test::compare(got_t, want).to_string() << "\n";
    EXPECT_TRUE(test::rel_error_within(got_t, want, 1e-4)) << layout << (packed ? " packed" : " padded");
  }
}

TEST(EmbedderReal, MiniLmMatchesTheReference) { check_layout("minilm"); }
TEST(EmbedderReal, XlmRobertaMatchesTheReference) { check_layout("xlmr"); }

}  // namespace
}  // namespace prism::engines::encode

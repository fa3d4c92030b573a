// SequenceSampler: greedy, seeds, each penalty and filter on hand-computed rows, the filters
// against a brute-force (full sort) reference at vocab 128k, statistical checks of sampling
// and of verify()'s output distribution (fixed seeds, tolerant bounds), logprobs.
#include "engines/generate/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace prism::engines::generate {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

frontends::SamplingParams greedy_params() {
  frontends::SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> out;
  for (double v : p) out.push_back(float(std::log(v)));
  return out;
}

// Which ids survive the filters: the row after sample() holds -inf for the dropped ones.
std::vector<int32_t> survivors(const std::vector<float>& row) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] > kNegInf) ids.push_back(int32_t(i));
  return ids;
}

std::vector<int32_t> filtered(const frontends::SamplingParams& params, std::vector<float> row, uint64_t seed = 1) {
  SequenceSampler s(params, seed, {});
  s.sample(row);
  return survivors(row);
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p) {
  const double n = std::accumulate(counts.begin(), counts.end(), 0.0);
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = n * p[i];
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> row = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  SequenceSampler a(greedy_params(), 1, {}), b(greedy_params(), 999, {});
  std::vector<float> row_b = row;
  EXPECT_EQ(a.sample(row).token, 1);
  EXPECT_EQ(b.sample(row_b).token, 1);  // no RNG involved
  std::vector<float> all_neg = {kNegInf, kNegInf, -5.0f};
  EXPECT_EQ(a.sample(all_neg).token, 2);
}

TEST(Sampler, VerySmallTemperatureIsGreedy) {
  frontends::SamplingParams p;
  p.temperature = 1e-7f;
  SequenceSampler s(p, 5, {});
  for (int i = 0; i < 20; ++i) {
    std::vector<float> row = {1.0f, 1.5f, 1.4999f, -3.0f};
    EXPECT_EQ(s.sample(row).token, 1);
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  frontends::SamplingParams p;
  p.temperature = 1.0f;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> rows(200, std::vector<float>(1000));
  for (auto& r : rows)
    for (float& v : r) v = normal(gen);
  auto run = [&](uint64_t seed) {
    SequenceSampler s(p, seed, {});
    std::vector<int32_t> out;
    for (auto r : rows) out.push_back(s.sample(r).token);
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, TopKKeepsTheKLargestAndTiesAtTheThreshold) {
  frontends::SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(filtered(p, {1.0f, 4.0f, 2.0f, 3.0f}), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(filtered(p, {1.0f, 4.0f, 3.0f, 3.0f}), (std::vector<int32_t>{1, 2, 3}));
  p.top_k = 10;  // more than the vocabulary: off
  EXPECT_EQ(filtered(p, {1.0f, 4.0f, 2.0f}), (std::vector<int32_t>{0, 1, 2}));
  p.top_k = 1;
  SequenceSampler s(p, 3, {});
  for (int i = 0; i < 10; ++i) {
    std::vector<float> row = {1.0f, 4.0f, 2.0f, 3.9f};
    EXPECT_EQ(s.sample(row).token, 1);
  }
}

TEST(Sampler, TopPKeepsTheSmallestHeadReachingTheMass) {
  const std::vector<float> row = log_probs({0.5, 0.3, 0.15, 0.05});
  frontends::SamplingParams p;
  p.top_p = 0.45f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0}));
  p.top_p = 0.55f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0, 1}));
  p.top_p = 0.85f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0, 1, 2}));
  p.top_p = 0.99f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0, 1, 2, 3}));
  // Order in the row does not matter.
  const std::vector<float> shuffled = log_probs({0.05, 0.3, 0.15, 0.5});
  p.top_p = 0.55f;
  EXPECT_EQ(filtered(p, shuffled), (std::vector<int32_t>{1, 3}));
}

TEST(Sampler, TopPIsComputedAfterTopK) {
  // top-k 2 leaves {0.5, 0.3} → renormalised {0.625, 0.375}; top_p 0.6 keeps only the first.
  const std::vector<float> row = log_probs({0.5, 0.3, 0.15, 0.05});
  frontends::SamplingParams p;
  p.top_k = 2;
  p.top_p = 0.6f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0}));
  p.top_p = 0.65f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0, 1}));
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheMostLikely) {
  const std::vector<float> row = log_probs({0.5, 0.3, 0.15, 0.05});
  frontends::SamplingParams p;
  p.min_p = 0.2f;  // p >= 0.1
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0, 1, 2}));
  p.min_p = 0.5f;  // p >= 0.25
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0, 1}));
  p.min_p = 1.0f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0}));
  // With temperature, min-p reads the tempered distribution: T = 2 → p ∝ sqrt(p):
  // sqrt(0.05 / 0.5) = 0.316 >= 0.3 keeps token 3.
  p.min_p = 0.3f;
  p.temperature = 2.0f;
  EXPECT_EQ(filtered(p, row), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(Sampler, RepetitionPenaltyOverPromptAndOutput) {
  frontends::SamplingParams p = greedy_params();
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1, 2, 2};
  SequenceSampler s(p, 1, prompt);
  std::vector<float> row = {1.0f, 2.0f, -1.0f, 1.5f};
  EXPECT_EQ(s.sample(row).token, 3);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_FLOAT_EQ(row[0], 1.0f);
  EXPECT_FLOAT_EQ(row[1], 1.0f);
  EXPECT_FLOAT_EQ(row[2], -2.0f);  // negative: × penalty, once however often it was seen
  EXPECT_FLOAT_EQ(row[3], 1.5f);
  // Token 3 is now generated: penalised too.
  row = {1.0f, 2.0f, -1.0f, 1.5f};
  EXPECT_EQ(s.sample(row).token, 0);
  EXPECT_FLOAT_EQ(row[3], 0.75f);
}

TEST(Sampler, FrequencyAndPresencePenaltiesOverOutputOnly) {
  frontends::SamplingParams p = greedy_params();
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0};
  SequenceSampler s(p, 1, prompt);
  std::vector<float> row = {3.0f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(row).token, 0);  // the prompt's token 0 is not penalised
  EXPECT_FLOAT_EQ(row[0], 3.0f);
  row = {3.0f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(row).token, 0);  // 3 - 0.5 - 0.25 = 2.25 > 2
  EXPECT_FLOAT_EQ(row[0], 2.25f);
  row = {3.0f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(row).token, 1);  // 3 - 2 × 0.5 - 0.25 = 1.75 < 2
  EXPECT_FLOAT_EQ(row[0], 1.75f);
  row = {3.0f, 2.0f, 1.0f};
  s.sample(row);
  EXPECT_FLOAT_EQ(row[0], 1.75f);
  EXPECT_FLOAT_EQ(row[1], 1.25f);
}

TEST(Sampler, NegativePresencePenaltyEncouragesRepeats) {
  frontends::SamplingParams p = greedy_params();
  p.presence_penalty = -1.0f;
  SequenceSampler s(p, 1, {});
  std::vector<float> row = {1.0f, 1.5f};
  EXPECT_EQ(s.sample(row).token, 1);
  row = {2.0f, 1.5f};
  EXPECT_EQ(s.sample(row).token, 1);  // 1.5 + 1 = 2.5 > 2
}

TEST(Sampler, TemperatureSamplingFollowsTheTemperedSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f, kNegInf};
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    frontends::SamplingParams p;
    p.temperature = temperature;
    SequenceSampler s(p, 1234, {});
    std::vector<double> expected;
    double total = 0;
    for (float l : logits) total += std::exp(double(l) / temperature);
    for (float l : logits) expected.push_back(std::exp(double(l) / temperature) / total);
    std::vector<int> counts(logits.size(), 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) {
      std::vector<float> row = logits;
      ++counts[size_t(s.sample(row).token)];
    }
    // 3 degrees of freedom: P(chi² > 16.3) = 0.001.
    EXPECT_LT(chi_square(counts, expected), 16.3) << "temperature " << temperature;
  }
}

TEST(Sampler, FilteredSamplingFollowsTheRenormalisedDistribution) {
  // top_k 3 of {0.4, 0.3, 0.2, 0.1}: {0.4, 0.3, 0.2} / 0.9.
  frontends::SamplingParams p;
  p.top_k = 3;
  SequenceSampler s(p, 99, {});
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 30000; ++i) {
    std::vector<float> row = log_probs({0.4, 0.3, 0.2, 0.1});
    ++counts[size_t(s.sample(row).token)];
  }
  EXPECT_LT(chi_square(counts, {0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0.0}), 13.8);  // 2 dof, p = 0.001
}

// The filters at a real vocabulary size against a full sort.
std::vector<int32_t> reference_filter(const std::vector<float>& logits, const frontends::SamplingParams& p) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> l = logits;
  for (float& v : l) v /= p.temperature;
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
  if (p.top_k > 0 && size_t(p.top_k) < ids.size()) {
    const float threshold = l[size_t(ids[size_t(p.top_k - 1)])];
    while (l[size_t(ids.back())] < threshold) ids.pop_back();
  }
  const float max = l[size_t(ids[0])];
  if (p.top_p < 1.0f) {
    double total = 0;
    for (int32_t t : ids) total += std::exp(double(l[size_t(t)] - max));
    double mass = 0;
    size_t keep = 0;
    for (; keep < ids.size(); ++keep) {
      if (keep > 0 && mass >= p.top_p * total) break;
      mass += std::exp(double(l[size_t(ids[keep])] - max));
    }
    ids.resize(keep);
  }
  if (p.min_p > 0.0f) std::erase_if(ids, [&](int32_t t) { return l[size_t(t)] < max + std::log(p.min_p); });
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(Sampler, FiltersMatchAFullSortAtVocab128k) {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(128256);
  for (float& v : logits) v = normal(gen);
  struct Case {
    int top_k;
    float top_p, min_p, temperature;
  };
  for (const Case& c : {Case{0, 0.9f, 0.0f, 1.0f}, Case{0, 0.999f, 0.0f, 0.7f}, Case{50, 1.0f, 0.0f, 1.0f},
                        Case{40, 0.8f, 0.0f, 1.3f}, Case{0, 1.0f, 0.01f, 1.0f}, Case{0, 0.5f, 0.05f, 1.0f},
                        Case{1000, 0.95f, 0.001f, 1.0f}, Case{0, 0.3f, 0.0f, 2.0f}}) {
    frontends::SamplingParams p;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.temperature = c.temperature;
    const std::vector<int32_t> got = filtered(p, logits);
    const std::vector<int32_t> want = reference_filter(logits, p);
    EXPECT_EQ(got.size(), want.size()) << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p;
    EXPECT_TRUE(got == want) << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p;
  }
}

TEST(Sampler, LogprobsAreTheRawLogSoftmaxMostLikelyFirst) {
  frontends::SamplingParams p;
  p.temperature = 0.3f;
  p.repetition_penalty = 3.0f;  // neither changes the reported logprobs
  p.logprobs = true;
  p.top_logprobs = 3;
  const std::vector<int32_t> prompt = {2};
  SequenceSampler s(p, 5, prompt);
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.5f, -2.0f};
  double total = 0;
  for (float l : logits) total += std::exp(double(l));
  auto lp = [&](int i) { return float(double(logits[size_t(i)]) - std::log(total)); };
  std::vector<float> row = logits;
  const SampledToken t = s.sample(row);
  EXPECT_EQ(t.logprobs.chosen.token, t.token);
  EXPECT_NEAR(t.logprobs.chosen.logprob, lp(t.token), 1e-6);
  ASSERT_EQ(t.logprobs.top.size(), 3u);
  EXPECT_EQ(t.logprobs.top[0].token, 1);  // tie with 2: the lower id first
  EXPECT_EQ(t.logprobs.top[1].token, 2);
  EXPECT_EQ(t.logprobs.top[2].token, 0);
  for (const frontends::TokenLogprob& e : t.logprobs.top) EXPECT_NEAR(e.logprob, lp(e.token), 1e-6);

  frontends::SamplingParams off;
  SequenceSampler quiet(off, 5, {});
  row = logits;
  const SampledToken q = quiet.sample(row);
  EXPECT_TRUE(q.logprobs.top.empty());
}

TEST(Sampler, MaskedRowsAndNaNAreHandled) {
  // -inf entries (a masked vocabulary) never win, are never drawn and come last in top_logprobs.
  frontends::SamplingParams p;
  p.top_k = 3;  // more than the finite values: keeps them all
  p.logprobs = true;
  p.top_logprobs = 4;
  SequenceSampler s(p, 8, {});
  for (int i = 0; i < 50; ++i) {
    std::vector<float> row = {kNegInf, 1.0f, kNegInf, 0.5f, kNegInf};
    const SampledToken t = s.sample(row);
    EXPECT_TRUE(t.token == 1 || t.token == 3) << t.token;
    ASSERT_EQ(t.logprobs.top.size(), 4u);
    EXPECT_EQ(t.logprobs.top[0].token, 1);
    EXPECT_EQ(t.logprobs.top[1].token, 3);
    EXPECT_EQ(t.logprobs.top[2].token, 0);
    EXPECT_EQ(t.logprobs.top[3].token, 2);
    EXPECT_EQ(t.logprobs.top[3].logprob, kNegInf);
  }
  std::vector<float> nan_row = {std::nanf(""), 2.0f, std::nanf(""), 1.0f};
  SequenceSampler g(greedy_params(), 1, {});
  EXPECT_EQ(g.sample(nan_row).token, 1);
  SequenceSampler r(frontends::SamplingParams{}, 1, {});
  for (int i = 0; i < 50; ++i) {
    std::vector<float> row = {std::nanf(""), 2.0f, std::nanf(""), 1.0f};
    const int32_t t = r.sample(row).token;
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  std::vector<float> dead = {kNegInf, kNegInf};
  EXPECT_EQ(r.sample(dead).token, 0);  // nothing to draw from: no crash, a valid id
}

TEST(Sampler, GreedyArgmaxOverAWideRowFindsTheFirstMaximum) {
  std::vector<float> row(128256, 0.0f);
  row[77777] = 5.0f;
  row[99999] = 5.0f;
  row[100] = std::nanf("");
  SequenceSampler s(greedy_params(), 1, {});
  EXPECT_EQ(s.sample(row).token, 77777);
}

// Rows of every length from 1 to 33 (the vectorised passes' whole vectors of 8 and 16 lanes
// and every tail): greedy finds the first maximum wherever it is, NaN never wins, and a draw
// only ever lands on a token with weight, including the last one of a short tail block.
TEST(Sampler, ShortRowsAtEveryPosition) {
  SequenceSampler g(greedy_params(), 1, {});
  for (int n = 1; n <= 33; ++n)
    for (int at = 0; at < n; ++at) {
      std::vector<float> row(size_t(n), -1.0f);
      for (int i = 0; i < n; i += 4) row[size_t(i)] = std::nanf("");
      row[size_t(at)] = 2.0f;
      if (at + 3 < n) row[size_t(at + 3)] = 2.0f;  // a later tie loses
      ASSERT_EQ(g.sample(row).token, at) << n << " " << at;
      // One token with all the mass (the others -inf): every draw is that token.
      std::vector<float> one(size_t(n), kNegInf);
      one[size_t(at)] = 0.5f;
      SequenceSampler r(frontends::SamplingParams{}, uint64_t(n * 100 + at), {});
      ASSERT_EQ(r.sample(one).token, at) << n << " " << at;
    }
}

// Logprobs of short rows: the reported values are a log-softmax of the raw row (they
// exponentiate to a distribution), the top list in order, for every tail length.
TEST(Sampler, LogprobsOfShortRowsNormalise) {
  frontends::SamplingParams p;
  p.logprobs = true;
  p.top_logprobs = 20;
  for (int n = 1; n <= 33; ++n) {
    SequenceSampler s(p, uint64_t(n), {});
    std::vector<float> row;
    for (int i = 0; i < n; ++i) row.push_back(float((i * 7) % 11) - 5.0f);
    const SampledToken t = s.sample(row);
    ASSERT_EQ(t.logprobs.top.size(), size_t(std::min(n, 20)));
    double mass = 0;
    for (const frontends::TokenLogprob& e : t.logprobs.top) mass += std::exp(double(e.logprob));
    if (n <= 20) {
      EXPECT_NEAR(mass, 1.0, 1e-5) << n;
    }
    for (size_t i = 1; i < t.logprobs.top.size(); ++i)
      EXPECT_GE(t.logprobs.top[i - 1].logprob, t.logprobs.top[i].logprob) << n;
  }
}

TEST(Sampler, VerifyGreedyAcceptsTheArgmaxPrefixThenCorrects) {
  const int64_t vocab = 4;
  // Argmaxes of the rows: 2, 1, 3, 0.
  const std::vector<float> rows = {0, 0, 5, 1, /**/ 0, 4, 1, 1, /**/ 1, 0, 0, 3, /**/ 9, 0, 0, 0};
  {
    SequenceSampler s(greedy_params(), 1, {});
    std::vector<float> l = rows;
    const std::vector<int32_t> draft = {2, 1, 0};  // third is wrong
    const auto out = s.verify(l, vocab, draft);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].token, 2);
    EXPECT_EQ(out[1].token, 1);
    EXPECT_EQ(out[2].token, 3);  // the correction
  }
  {
    SequenceSampler s(greedy_params(), 1, {});
    std::vector<float> l = rows;
    const std::vector<int32_t> draft = {2, 1, 3};
    const auto out = s.verify(l, vocab, draft);
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[3].token, 0);  // the bonus token
  }
  {
    SequenceSampler s(greedy_params(), 1, {});
    std::vector<float> l(rows.begin(), rows.begin() + 4);
    const auto out = s.verify(l, vocab, {});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].token, 2);
  }
}

TEST(Sampler, VerifyGreedyEqualsPlainDecodingWithPenalties) {
  // The penalty of each row must see the draft tokens accepted before it.
  frontends::SamplingParams p = greedy_params();
  p.frequency_penalty = 2.0f;
  const int64_t vocab = 3;
  const std::vector<float> row = {3.0f, 2.5f, 0.0f};
  SequenceSampler plain(p, 1, {});
  std::vector<int32_t> want;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> r = row;
    want.push_back(plain.sample(r).token);
  }
  EXPECT_EQ(want, (std::vector<int32_t>{0, 1, 0}));
  SequenceSampler spec(p, 1, {});
  std::vector<float> rows;
  for (int i = 0; i < 3; ++i) rows.insert(rows.end(), row.begin(), row.end());
  const std::vector<int32_t> draft = {0, 0};  // the second is wrong once token 0 is penalised
  const auto out = spec.verify(rows, vocab, draft);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].token, 0);
  EXPECT_EQ(out[1].token, 1);
}

TEST(Sampler, VerifySamplingKeepsTheTargetDistribution) {
  // Row 0: p = {0.1, 0.6, 0.2, 0.1}; draft token 1. Output token 0 must follow p whatever the
  // draft; when the draft is accepted, the next token follows row 1's q.
  const std::vector<double> p = {0.1, 0.6, 0.2, 0.1};
  const std::vector<double> q = {0.25, 0.25, 0.25, 0.25};
  const int64_t vocab = 4;
  for (int32_t drafted : {1, 3}) {
    std::vector<int> first(4, 0), second(4, 0);
    int accepted = 0;
    const int n = 30000;
    for (int i = 0; i < n; ++i) {
      SequenceSampler s(frontends::SamplingParams{}, uint64_t(i) * 7919 + 1, {});
      std::vector<float> rows = log_probs(p);
      const std::vector<float> r1 = log_probs(q);
      rows.insert(rows.end(), r1.begin(), r1.end());
      const std::vector<int32_t> draft = {drafted};
      const auto out = s.verify(rows, vocab, draft);
      ASSERT_GE(out.size(), 1u);
      ++first[size_t(out[0].token)];
      if (out[0].token == drafted) {
        ASSERT_EQ(out.size(), 2u);
        ++accepted;
        ++second[size_t(out[1].token)];
      } else {
        ASSERT_EQ(out.size(), 1u);
      }
    }
    EXPECT_LT(chi_square(first, p), 16.3) << "draft " << drafted;
    EXPECT_LT(chi_square(second, q), 16.3) << "draft " << drafted;
    EXPECT_NEAR(double(accepted) / n, p[size_t(drafted)], 0.015) << "draft " << drafted;
  }
}

TEST(Sampler, VerifyNeverAcceptsAFilteredDraftToken) {
  frontends::SamplingParams p;
  p.top_k = 2;
  const int64_t vocab = 4;
  for (int i = 0; i < 200; ++i) {
    SequenceSampler s(p, uint64_t(i), {});
    std::vector<float> rows = log_probs({0.4, 0.3, 0.2, 0.1, 0.25, 0.25, 0.25, 0.25});
    const std::vector<int32_t> draft = {3};
    const auto out = s.verify(rows, vocab, draft);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].token == 0 || out[0].token == 1) << out[0].token;
  }
}

TEST(Sampler, VerifyReportsLogprobsPerToken) {
  frontends::SamplingParams p = greedy_params();
  p.logprobs = true;
  p.top_logprobs = 1;
  SequenceSampler s(p, 1, {});
  std::vector<float> rows = log_probs({0.7, 0.2, 0.1, /**/ 0.1, 0.1, 0.8});
  const std::vector<int32_t> draft = {0};
  const auto out = s.verify(rows, 3, draft);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0].logprobs.chosen.logprob, std::log(0.7), 1e-5);
  EXPECT_EQ(out[1].token, 2);
  EXPECT_NEAR(out[1].logprobs.chosen.logprob, std::log(0.8), 1e-5);
  ASSERT_EQ(out[1].logprobs.top.size(), 1u);
  EXPECT_EQ(out[1].logprobs.top[0].token, 2);
}

}  // namespace
}  // namespace prism::engines::generate

// engines/generate/sampler.cpp: one choice's token policy over a row of logits. Pure CPU
// code, no tensors, no threads; allocation-free per step after the first (scratch members).
//
// NOTE: a row costs a few O(vocab) passes, vectorised where it matters (max, exp, sums, the
// scans: runtime/row_math.h, at the CPU's instruction-set tier); penalties are sparse (over
// the tokens seen). No filter sorts the vocabulary: top-k takes its threshold from a
// k-element heap (nth_element for large k); top-p is a weighted quickselect (nth_element
// halves the range, the mass of the upper half says which half holds the cut: O(vocab)
// expected); min-p is a cutoff in logit space (p >= min_p × p_max ⇔ logit >= max + log(min_p)).
#include "engines/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>

#include "base/check.h"
#include "runtime/row_math.h"

namespace prism::engines::generate {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Below this temperature sampling is greedy (as vLLM does): 1/T would overflow the logits.
constexpr float kMinTemperature = 1e-5f;
// Weights are summed in blocks of kBlock (row_math::block_sums), in the same order on every
// tier: draws and totals both use those sums, so a scan over blocks reaches exactly the total
// it was drawn against.
constexpr size_t kBlock = row_math::kSumBlock;

// argmax, the lowest id on ties; NaN never wins. 0 when every value is -inf or NaN.
int32_t argmax(std::span<const float> row) {
  const float best = row_math::max_value(row);
  if (!(best > kNegInf)) return 0;
  return int32_t(row_math::first_equal(row, best));
}

// Calls f(i) for each i in increasing order with x[i] > threshold, re-reading threshold
// after each call (f may raise it). Most values fail the test: the scan between hits is
// vectorised.
template <class F>
void scan_above(std::span<const float> x, const float& threshold, F&& f) {
  for (size_t i = row_math::first_above(x, threshold); i < x.size();
       i = i + 1 + row_math::first_above(x.subspan(i + 1), threshold))
    f(i);
}

// The k-th largest value (k >= 1, k <= x.size()): a k-element min-heap for small k (one
// compare per value), nth_element on a copy beyond.
float kth_largest(std::span<const float> x, size_t k, std::vector<float>& scratch) {
  if (k <= 1024) {
    std::priority_queue<float, std::vector<float>, std::greater<float>> heap;
    float threshold = kNegInf;  // the heap's minimum once it holds k values
    scan_above(x, threshold, [&](size_t i) {
      if (heap.size() == k) heap.pop();
      heap.push(x[i]);
      if (heap.size() == k) threshold = heap.top();
    });
    return heap.size() == k ? heap.top() : kNegInf;  // fewer than k finite values: keep them all
  }
  scratch.assign(x.begin(), x.end());
  for (float& v : scratch)
    if (std::isnan(v)) v = kNegInf;
  std::nth_element(scratch.begin(), scratch.begin() + ptrdiff_t(k - 1), scratch.end(), std::greater<float>());
  return scratch[k - 1];
}

struct Weighted {
  float weight;
  int32_t token;
};

// One row's working buffers, shared by every sampler on the thread (see sampler.h).
struct Scratch {
  std::vector<int32_t> candidates;  // the filters' survivors, unless `all`
  bool all = true;
  std::vector<float> values;   // candidate logits (after process), or a row copy (top-k)
  std::vector<float> weights;  // exp(logit - max) per candidate
  // The sums of weights' blocks as of the last sum_weights(): what pick() draws against.
  std::vector<float> block_sums;
  std::vector<float> raw;      // the row before processing (logprobs)
  std::vector<Weighted> ranked;  // top-p selection
  int32_t token_at(size_t i) const { return all ? int32_t(i) : candidates[i]; }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The total of the scratch weights, from their block sums (left in the scratch for pick()).
double sum_weights(Scratch& sc) {
  sc.block_sums.resize((sc.weights.size() + kBlock - 1) / kBlock);
  return row_math::block_sums(sc.weights, sc.block_sums);
}

}  // namespace

SequenceSampler::SequenceSampler(const frontends::SamplingParams& params, uint64_t seed, std::span<const int32_t> prompt)
    : params_(params), rng_(seed) {
  if (params_.repetition_penalty != 1.0f)
    for (int32_t t : prompt) ++seen_[t];
}

bool SequenceSampler::greedy() const { return params_.temperature < kMinTemperature; }

double SequenceSampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

void SequenceSampler::record(int32_t token) {
  ++output_counts_[token];
  if (params_.repetition_penalty != 1.0f) ++seen_[token];
}

void SequenceSampler::process(std::span<float> logits) {
  Scratch& sc = scratch();
  const auto vocab = int64_t(logits.size());
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab; };
  // Repetition penalty (HF): over prompt and output tokens.
  if (const float rp = params_.repetition_penalty; rp != 1.0f) {
    for (const auto& [token, count] : seen_) {
      if (!in_vocab(token)) continue;
      float& l = logits[size_t(token)];
      l = l > 0 ? l / rp : l * rp;
    }
  }
  // Frequency and presence penalties (OpenAI): over output tokens.
  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    for (const auto& [token, count] : output_counts_) {
      if (!in_vocab(token) || count <= 0) continue;
      logits[size_t(token)] -= float(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }
  sc.all = true;
  sc.candidates.clear();
  if (greedy()) return;
  if (params_.temperature != 1.0f) {
    const float inv = 1.0f / params_.temperature;
    for (float& l : logits) l *= inv;
  }
  const bool top_k = params_.top_k > 0 && params_.top_k < vocab;
  const bool top_p = params_.top_p < 1.0f;
  const bool min_p = params_.min_p > 0.0f;
  if (!top_k && !top_p && !min_p) return;
  const float max_logit = row_math::max_value(logits);
  if (!(max_logit > kNegInf)) return;  // nothing finite: the draw falls back to the argmax

  // Top-k: keep the logits >= the k-th largest (ties at the threshold are kept, as HF does).
  // Every filter keeps the max-logit token, so sc.candidates is never empty.
  float cutoff = kNegInf;
  if (top_k) cutoff = kth_largest(logits, size_t(params_.top_k), sc.values);
  if (top_k || top_p) {
    for (int64_t i = 0; i < vocab; ++i) {
      const float l = logits[size_t(i)];
      if (l >= cutoff && l > kNegInf) sc.candidates.push_back(int32_t(i));
    }
    sc.all = false;
  }
  if (top_p) top_p_filter(logits, max_logit);
  // Min-p: p >= min_p × p_max, i.e. logit >= max + log(min_p) (the ratio to the most likely
  // token does not change when the earlier filters renormalise).
  if (min_p) {
    const float min_logit = max_logit + std::log(params_.min_p);
    if (sc.all) {
      for (int64_t i = 0; i < vocab; ++i)
        if (logits[size_t(i)] >= min_logit) sc.candidates.push_back(int32_t(i));
      sc.all = false;
    } else {
      std::erase_if(sc.candidates, [&](int32_t t) { return logits[size_t(t)] < min_logit; });
    }
  }
  PRISM_CHECK(!sc.candidates.empty());
  sc.values.resize(sc.candidates.size());
  for (size_t i = 0; i < sc.candidates.size(); ++i) sc.values[i] = logits[size_t(sc.candidates[i])];
  std::fill(logits.begin(), logits.end(), kNegInf);
  for (size_t i = 0; i < sc.candidates.size(); ++i) logits[size_t(sc.candidates[i])] = sc.values[i];
}

// NOTE: top-p keeps the most likely tokens until their mass reaches top_p (the one that
// crosses it too): in descending order (ties: lower id first), token i stays iff the mass
// before it is < top_p × total. Invariant of the search: every token before `lo` stays
// (mass_before(lo) = acc < target) and the first dropped one is at most `hi`.
void SequenceSampler::top_p_filter(std::span<const float> logits, float max_logit) {
  Scratch& sc = scratch();
  sc.values.resize(sc.candidates.size());
  for (size_t i = 0; i < sc.candidates.size(); ++i) sc.values[i] = logits[size_t(sc.candidates[i])];
  sc.weights.resize(sc.values.size());
  row_math::exp_shifted(sc.values, max_logit, sc.weights);  // -inf, NaN: 0
  const double target = double(params_.top_p) * sum_weights(sc);
  // Usually the mass is in a small head: when the tokens within `span` of the max logit
  // already hold the target mass, the cut is among them and the rest need no ranking.
  float floor = 0.0f;
  for (const float span : {8.0f, 16.0f}) {
    const float w_min = std::exp(-span);
    double mass = 0;
    for (float w : sc.weights) mass += w >= w_min ? w : 0.0f;
    if (mass >= target) {
      floor = w_min;
      break;
    }
  }
  sc.ranked.clear();
  for (size_t i = 0; i < sc.candidates.size(); ++i)
    if (sc.weights[i] >= floor) sc.ranked.push_back({sc.weights[i], sc.candidates[i]});
  const auto better = [](const Weighted& a, const Weighted& b) {
    return a.weight > b.weight || (a.weight == b.weight && a.token < b.token);
  };
  size_t lo = 0, hi = sc.ranked.size();
  double acc = 0;
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(sc.ranked.begin() + ptrdiff_t(lo), sc.ranked.begin() + ptrdiff_t(mid), sc.ranked.begin() + ptrdiff_t(hi),
                     better);
    double upper = 0;
    for (size_t i = lo; i < mid; ++i) upper += sc.ranked[i].weight;
    if (acc + upper >= target) {
      hi = mid;
    } else {
      acc += upper;
      lo = mid;
    }
  }
  std::sort(sc.ranked.begin() + ptrdiff_t(lo), sc.ranked.begin() + ptrdiff_t(hi), better);
  size_t keep = hi;
  for (size_t i = lo; i < hi; ++i) {
    if (i > 0 && acc >= target) {
      keep = i;
      break;
    }
    acc += sc.ranked[i].weight;
  }
  sc.candidates.resize(keep);
  for (size_t i = 0; i < keep; ++i) sc.candidates[i] = sc.ranked[i].token;
}

double SequenceSampler::weigh(std::span<const float> logits) {
  Scratch& sc = scratch();
  const std::span<const float> values = sc.all ? logits : std::span<const float>(sc.values);
  sc.weights.resize(values.size());
  const float max_logit = row_math::max_value(values);
  if (!(max_logit > kNegInf)) {
    std::fill(sc.weights.begin(), sc.weights.end(), 0.0f);
    return 0;
  }
  row_math::exp_shifted(values, max_logit, sc.weights);
  return sum_weights(sc);
}

int32_t SequenceSampler::pick(double total) {
  Scratch& sc = scratch();
  const double target = uniform() * total;
  double cumulative = 0;
  int32_t last = -1;  // the last token with weight: rounding may leave the target at the end
  PRISM_CHECK(sc.block_sums.size() == (sc.weights.size() + kBlock - 1) / kBlock);
  for (size_t b = 0; b < sc.weights.size(); b += kBlock) {
    const size_t n = std::min(kBlock, sc.weights.size() - b);
    const float block = sc.block_sums[b / kBlock];
    if (block <= 0) continue;
    if (cumulative + block > target) {
      double within = cumulative;
      for (size_t i = b; i < b + n; ++i) {
        if (sc.weights[i] <= 0) continue;
        last = sc.token_at(i);
        within += sc.weights[i];
        if (within > target) return last;
      }
      return last;
    }
    cumulative += block;
    for (size_t i = b + n; i-- > b;)
      if (sc.weights[i] > 0) {
        last = sc.token_at(i);
        break;
      }
  }
  return last;
}

frontends::TokenLogprobs SequenceSampler::logprobs_of(std::span<const float> raw, int32_t chosen) {
  Scratch& sc = scratch();
  frontends::TokenLogprobs out;
  const float max_logit = row_math::max_value(raw);
  sc.weights.resize(raw.size());
  row_math::exp_shifted(raw, max_logit, sc.weights);
  const double log_total = double(max_logit) + std::log(sum_weights(sc));
  auto logprob = [&](int32_t t) { return float(double(raw[size_t(t)]) - log_total); };
  out.chosen = {chosen, logprob(chosen)};
  const size_t n = size_t(std::clamp<int64_t>(params_.top_logprobs, 0, int64_t(raw.size())));
  if (n > 0) {
    // The n most likely: a heap whose top is the worst kept (lower logit, then higher id).
    const auto better = [&](int32_t a, int32_t b) {
      const float va = raw[size_t(a)], vb = raw[size_t(b)];
      return va > vb || (va == vb && a < b);
    };
    std::priority_queue<int32_t, std::vector<int32_t>, decltype(better)> heap(better);
    // Ids come in increasing order, so a later value equal to the worst kept is not better.
    float threshold = -std::numeric_limits<float>::max();  // -inf logits are listed too
    scan_above(raw, threshold, [&](size_t i) {
      if (heap.size() == n) heap.pop();
      heap.push(int32_t(i));
      if (heap.size() == n) threshold = raw[size_t(heap.top())];
    });
    if (heap.size() < n)  // fewer than n values above -inf: fill with the -inf ones, lowest ids first
      for (size_t i = 0; i < raw.size() && heap.size() < n; ++i)
        if (raw[i] == kNegInf) heap.push(int32_t(i));
    out.top.resize(heap.size());
    for (size_t i = heap.size(); i-- > 0;) {
      out.top[i] = {heap.top(), logprob(heap.top())};
      heap.pop();
    }
  }
  return out;
}

SampledToken SequenceSampler::sample(std::span<float> logits) {
  Scratch& sc = scratch();
  PRISM_CHECK(!logits.empty());
  if (params_.logprobs) sc.raw.assign(logits.begin(), logits.end());
  process(logits);
  SampledToken out;
  if (greedy()) {
    out.token = argmax(logits);
  } else {
    const double total = weigh(logits);
    out.token = total > 0 ? pick(total) : argmax(logits);
  }
  if (params_.logprobs) out.logprobs = logprobs_of(sc.raw, out.token);
  record(out.token);
  return out;
}

std::vector<SampledToken> SequenceSampler::verify(std::span<float> logits, int64_t vocab,
                                                  std::span<const int32_t> draft) {
  Scratch& sc = scratch();
  PRISM_CHECK(vocab > 0 && int64_t(logits.size()) == int64_t(draft.size() + 1) * vocab);
  std::vector<SampledToken> out;
  for (size_t i = 0; i <= draft.size(); ++i) {
    const std::span<float> row = logits.subspan(i * size_t(vocab), size_t(vocab));
    if (params_.logprobs) sc.raw.assign(row.begin(), row.end());
    process(row);
    SampledToken token;
    bool accepted = false;
    if (greedy()) {
      token.token = argmax(row);
      accepted = i < draft.size() && token.token == draft[i];
    } else {
      double total = weigh(row);
      if (!(total > 0)) {
        token.token = argmax(row);
        accepted = i < draft.size() && token.token == draft[i];
      } else if (i == draft.size()) {
        token.token = pick(total);  // the bonus token
      } else {
        // NOTE: a deterministic draft token x is accepted with probability p(x); otherwise
        // the token comes from p with x removed, renormalised. P(x) = p(x) and, for y ≠ x,
        // (1 - p(x)) × p(y) / (1 - p(x)) = p(y): the output is distributed as p.
        const int32_t x = draft[i];
        size_t index = sc.weights.size();
        if (x >= 0 && x < vocab) {
          if (sc.all) index = size_t(x);
          else if (auto it = std::find(sc.candidates.begin(), sc.candidates.end(), x); it != sc.candidates.end())
            index = size_t(it - sc.candidates.begin());
        }
        const double px = index < sc.weights.size() ? sc.weights[index] / total : 0.0;
        if (uniform() < px) {
          token.token = x;
          accepted = true;
        } else {
          if (index < sc.weights.size()) sc.weights[index] = 0.0f;
          total = sum_weights(sc);
          token.token = total > 0 ? pick(total) : x;  // nothing else has mass: p(x) was 1
        }
      }
    }
    if (params_.logprobs) token.logprobs = logprobs_of(sc.raw, token.token);
    record(token.token);
    out.push_back(std::move(token));
    if (!accepted) break;
  }
  return out;
}

}  // namespace prism::engines::generate

// engines/generate/sampler.h: picking a sequence's next token from its logits. One
// SequenceSampler per choice holds what its policy needs across steps: the RNG (seeded, so a
// seed reproduces the output) and the token counts the penalties read. Pure CPU code over a
// row of floats; no tensors, no threads.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "frontends/generate_payload.h"
#include "frontends/sampling_params.h"

namespace prism::engines::generate {

struct SampledToken {
  int32_t token = 0;
  frontends::TokenLogprobs logprobs;  // filled when SamplingParams::logprobs (top when top_logprobs > 0)
};

class SequenceSampler {
 public:
  // prompt: the tokens the repetition penalty counts from the start. seed: the resolved seed
  // (SamplingParams::seed + choice index, or a random one).
  SequenceSampler(const frontends::SamplingParams& params, uint64_t seed, std::span<const int32_t> prompt);

  // The next token from one row of logits ([vocab] f32; modified in place by the penalties
  // and filters). Records the token as generated (penalty counts), as accept() does.
  SampledToken sample(std::span<float> logits);

  // Speculative verification. logits: draft.size() + 1 rows of [vocab] (row i: the
  // distribution after the context plus draft[0..i)). Returns the tokens this step produces:
  // the accepted prefix of the draft plus one more (the correction or the bonus token), 1 to
  // draft.size() + 1 of them, each recorded as generated. Greedy: a draft token is accepted
  // iff it is the argmax, so the output equals plain greedy decoding token for token.
  // Sampling: a (deterministic) draft token x is accepted with probability p(x); on
  // rejection the token is drawn from p with x removed — the output distribution is p's.
  std::vector<SampledToken> verify(std::span<float> logits, int64_t vocab, std::span<const int32_t> draft);

  const frontends::SamplingParams& params() const { return params_; }

 private:
  void record(int32_t token);
  // Penalties and temperature in place; unless greedy, then the filters: the tokens they drop
  // become -inf and the scratch lists the survivors (or says every token survives).
  void process(std::span<float> logits);
  bool greedy() const;
  void top_p_filter(std::span<const float> logits, float max_logit);
  // weights = exp(candidate logit - max) over the processed row's candidates, in the
  // thread's scratch; returns their sum.
  double weigh(std::span<const float> logits);
  // A draw from the scratch weights (entries may have been zeroed since weigh()); total:
  // their sum.
  int32_t pick(double total);
  double uniform();  // [0, 1), 53 random bits
  // Log-softmax of the raw row: the chosen token and the top_logprobs most likely.
  frontends::TokenLogprobs logprobs_of(std::span<const float> raw, int32_t chosen);

  frontends::SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;  // generated tokens
  std::unordered_map<int32_t, int32_t> seen_;           // prompt and generated (repetition penalty)
  // NOTE: the per-row buffers (candidates, weights: vocabulary-sized) are not members but
  // one thread_local scratch in sampler.cpp: samplers run on their engine's thread, one row
  // at a time, so a thousand running sequences do not hold a thousand copies.
};

}  // namespace prism::engines::generate

// frontends/sampling_params.h: how one sequence picks its next tokens and when it
// stops. Plain data, filled by the api from OpenAI's parameters (checked there) and read by
// the engine's sampler and stop checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace prism::frontends {

struct SamplingParams {
  // Logit processing, in this order: repetition penalty (HF: over prompt and output tokens,
  // logit / p when positive, × p when negative), frequency and presence penalties (OpenAI:
  // over output tokens, logit -= count × frequency + (count > 0) × presence), temperature,
  // then the top-k, top-p and min-p filters.
  float temperature = 1.0f;  // 0: greedy (argmax; the filters and the RNG are not used)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off; else drop tokens with p < min_p × p_max
  float repetition_penalty = 1.0f;  // 1: off
  float frequency_penalty = 0.0f;   // [-2, 2]
  float presence_penalty = 0.0f;    // [-2, 2]
  // Same seed and same input: same output (choice i of n uses seed + i). None: a random seed.
  std::optional<uint64_t> seed;

  int max_tokens = 16;  // generated tokens at most (>= 1); the api caps it by the context
  int min_tokens = 0;   // stop tokens and strings are ignored before this many
  std::vector<std::string> stop;         // stop strings: the text ends before the first one
  std::vector<int32_t> stop_token_ids;   // besides the model's end-of-sequence tokens
  bool ignore_eos = false;               // keep going past end-of-sequence tokens (benchmarks)

  bool logprobs = false;  // report the chosen token's log-probability
  int top_logprobs = 0;   // and this many most likely alternatives (0..20)
  int n = 1;              // independent choices for the same prompt (they share its KV blocks)
};

}  // namespace prism::frontends

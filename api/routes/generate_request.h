// api/routes/generate_request.h: the request fields /v1/chat/completions and /v1/completions
// share (OpenAI's sampling parameters plus vLLM's extras), read into native values with the
// field named in the first error, and turned into the engine's SamplingParams once the model
// is known (its defaults fill what the request left unset).
// Must not: know the model (no frontend here: the routes check token ids and the context).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/json_fields.h"
#include "base/status.h"
#include "frontends/sampling_params.h"
#include "serving/request.h"

namespace prism::api {

// Which OpenAI route a request came through: the fields differ in a few places (logprobs is
// a bool + top_logprobs in chat, an int 0..5 in completions; max_completion_tokens is chat's).
enum class GenerateApi { chat, completions };

inline constexpr int kMaxChoices = 16;        // n (and best_of)
inline constexpr int kMaxStopStrings = 4;     // OpenAI's limit on `stop`
inline constexpr int kMaxTopLogprobs = 20;    // chat's top_logprobs
inline constexpr int kMaxLegacyLogprobs = 5;  // completions' logprobs
inline constexpr int kMaxStopTokenIds = 64;
inline constexpr int64_t kDefaultCompletionsMaxTokens = 16;  // OpenAI's default for /v1/completions

// What the request set. Unset sampling fields (nullopt) take the model's defaults.
struct GenerateFields {
  std::optional<double> temperature;         // [0, 2]
  std::optional<double> top_p;               // (0, 1]
  std::optional<int64_t> top_k;              // >= 0, or -1 (vLLM's "off"): 0 = off
  std::optional<double> min_p;               // [0, 1]
  std::optional<double> repetition_penalty;  // (0, 2]
  std::optional<double> frequency_penalty;   // [-2, 2]
  std::optional<double> presence_penalty;    // [-2, 2]
  std::optional<uint64_t> seed;              // any JSON integer (negative ones wrap)
  std::optional<int64_t> max_tokens;         // >= 1; none: the room left in the context (chat)
  int64_t min_tokens = 0;
  std::vector<std::string> stop;        // at most kMaxStopStrings, none empty
  std::vector<int64_t> stop_token_ids;  // checked against the vocabulary by the route
  bool ignore_eos = false;
  bool logprobs = false;
  int top_logprobs = 0;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  serving::Lane lane = serving::Lane::online;
};

// Reads every shared field (and the route's own form of logprobs and max_tokens); the first
// error stays in `f` (param = the field, e.g. "stream_options.include_usage", "stop[2]").
GenerateFields read_generate_fields(JsonFields& f, GenerateApi api);

// The engine's parameters: `defaults` (GenerateFrontend::default_sampling()) overridden by
// what the request set, with max_tokens already resolved against the context and the stop
// token ids already checked. invalid_argument when min_tokens > max_tokens.
Result<frontends::SamplingParams> to_sampling_params(const GenerateFields& fields,
                                                             const frontends::SamplingParams& defaults,
                                                             int max_tokens, std::vector<int32_t> stop_token_ids);

}  // namespace prism::api

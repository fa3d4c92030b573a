// api/routes/completions.h: OpenAI's legacy completions route for deployments of task "chat".
//   POST /v1/completions {"model", "prompt", "echo"?, "logprobs"?: 0..5, "best_of"?: n,
//     "suffix"?: unsupported, and the sampling fields of /v1/chat/completions
//     (generate_request.h; max_tokens defaults to 16, as OpenAI's)}
//   → "text_completion" (or a stream of "text_completion" chunks; generate_call.h).
// `prompt` is a string, an array of strings, an array of token ids, or an array of token-id
// arrays: several prompts are several engine requests answered together, choice i * n + k
// being choice k of prompt i. Texts are tokenized here with the tokenizer's special tokens.
// Must not: block an I/O thread, or see tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/router.h"
#include "api/routes/text_or_tokens.h"
#include "base/status.h"
#include "serving/deployment_set.h"

namespace prism::api {

// `deployments` is not owned and must outlive the server.
void add_completions_routes(Router& router, serving::DeploymentSet& deployments);

// ---- the route's pure steps, exposed for tests ----

inline constexpr std::size_t kMaxPrompts = 64;  // prompts per request

// A request's `prompt` in the form the client sent: texts, or token ids (never both).
using CompletionPrompts = TextOrTokens;

// Reads `prompt`: its form (one of the four, never mixed), non-empty strings and arrays,
// JSON integers for token ids, at most kMaxPrompts prompts. invalid_argument whose message
// names the element ("prompt[1][3] is 1.5, not an integer token id."). The vocabulary is
// checked later, by the model's frontend.
Result<CompletionPrompts> parse_completion_prompt(const nlohmann::json& prompt);

}  // namespace prism::api

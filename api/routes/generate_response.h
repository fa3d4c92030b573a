// api/routes/generate_response.h: the JSON bodies of /v1/chat/completions and /v1/completions
// in OpenAI's shapes: the whole response ("chat.completion", "text_completion") and the
// stream's chunks ("chat.completion.chunk", "text_completion" again), with logprobs in each
// route's shape (chat: content[{token, logprob, bytes, top_logprobs}]; completions, the legacy
// one: tokens, token_logprobs, top_logprobs [{token: logprob}], text_offset) and usage
// (prompt_tokens_details: cached_tokens; chat adds image_tokens / video_tokens when non-zero).
// Pure functions of plain data: a token's text comes through a callback (the frontend's).
// Must not: know the engine or the HTTP layer.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "api/routes/generate_request.h"
#include "frontends/generate_payload.h"

namespace prism::api {

// A token's text (GenerateFrontend::token_text); its bytes are the string's bytes.
using TokenTextFn = std::function<std::string(int32_t)>;

// What every body of one call carries.
struct ReplyHeader {
  GenerateApi api = GenerateApi::chat;
  std::string id;                  // "chatcmpl-<request id>" / "cmpl-<request id>"
  std::string model;               // as the client named it
  int64_t created = 0;             // Unix seconds
  std::string system_fingerprint;  // the deployment's configuration, e.g. "prism-bf16"
  bool include_usage = false;      // streams: "usage": null on every chunk but the last
};

struct Usage {
  int64_t prompt_tokens = 0;      // over every prompt (counted once, whatever n)
  int64_t completion_tokens = 0;  // over every choice
  int64_t cached_tokens = 0;      // prompt tokens whose K/V came from the prefix cache
  int64_t image_tokens = 0;       // prompt tokens an image's features fill (chat; shown when > 0)
  int64_t video_tokens = 0;       // prompt tokens a video's features fill (chat; shown when > 0)
};

// One choice's piece of a stream: its first chunk (chat: role), new text, or its end.
struct StreamPiece {
  int index = 0;
  bool role = false;  // chat: the choice's first chunk, delta {"role": "assistant", "content": ""}
  std::string text;
  std::span<const frontends::TokenLogprobs> logprobs;
  std::optional<frontends::FinishReason> finish;  // set: delta {} (chat) / text "" and the reason
};

// One chunk event's JSON. text_offset: completions' legacy logprobs, the offset in the
// choice's text of this piece's first token; advanced past its tokens' texts.
std::string chunk_json(const ReplyHeader& header, const StreamPiece& piece, const TokenTextFn& token_text,
                       int64_t& text_offset);
// The last chunk of a stream with include_usage: "choices": [] and the usage.
std::string usage_chunk_json(const ReplyHeader& header, const Usage& usage);

// One choice of the whole response.
struct FinalChoice {
  int index = 0;
  std::string text;                                            // completions with echo: the prompt's text first
  std::span<const frontends::TokenLogprobs> logprobs;  // empty without logprobs
  bool has_logprobs = false;                                   // the request asked for them
  frontends::FinishReason finish = frontends::FinishReason::stop;
  int64_t text_offset = 0;  // completions: the offset of the first generated token (echo: the prompt's length)
};
std::string response_json(const ReplyHeader& header, std::span<const FinalChoice> choices, const Usage& usage,
                          const TokenTextFn& token_text);

// The logprobs objects, exposed for tests. Chat: {"content": [...]}; legacy: advances text_offset.
nlohmann::ordered_json chat_logprobs_json(std::span<const frontends::TokenLogprobs> logprobs,
                                          const TokenTextFn& token_text);
nlohmann::ordered_json legacy_logprobs_json(std::span<const frontends::TokenLogprobs> logprobs,
                                            const TokenTextFn& token_text, int64_t& text_offset);

// JSON text of a body; invalid UTF-8 (a token's partial character) becomes U+FFFD.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace prism::api

// api/routes/chat_completions.h: OpenAI's chat route for deployments of task "chat".
//   POST /v1/chat/completions {"model", "messages", "stream"?, "stream_options"?, "n"?, "stop"?,
//     "seed"?, "temperature"?, "top_p"?, "max_tokens"? | "max_completion_tokens"?,
//     "frequency_penalty"?, "presence_penalty"?, "logprobs"?, "top_logprobs"?, "user"?,
//     "tools"?, "tool_choice"?, "response_format"?, "chat_template_kwargs"?,
//     vLLM's "top_k"?, "min_p"?, "repetition_penalty"?, "min_tokens"?, "ignore_eos"?,
//     "stop_token_ids"?, and Prism's "priority"?: "online"|"bulk", "prism"?: {visual-token
//     budget overrides}}
//   → "chat.completion" (or a stream of "chat.completion.chunk" events; generate_call.h).
// The conversation is rendered with the model's own chat template and tokenized here, on the
// I/O thread (GenerateFrontend::chat_prompt); the engine sees checked token ids.
// A vision-language deployment also takes image_url and video_url content parts: they are
// read, decoded and preprocessed (chat_media.h) on a worker of the media pool, never on the
// I/O thread, with the rest of the request's preparation, and travel as GenerateInput::media.
// A full media queue answers 429 with Retry-After.
// Tools are passed to the template; tool calls are not parsed out of the output.
// Must not: block an I/O thread, or see tensors.
#pragma once

#include <nlohmann/json.hpp>

#include "api/errors.h"
#include "api/router.h"
#include "base/status.h"
#include "serving/deployment_set.h"
#include "serving/work_pool.h"
#include "text/chat_template.h"

namespace prism::api {

// `deployments` and `media_pool` are not owned and must outlive the server.
void add_chat_completions_routes(Router& router, serving::DeploymentSet& deployments, serving::WorkPool& media_pool);

// ---- the route's pure steps, exposed for tests ----

// The conversation of a request body (parsed with ordered_json, so tools keep their key order
// for the template's tojson): `messages` (roles system, developer (rendered as system), user,
// assistant, tool; content a string or an array of {"type": "text", "text"} parts, joined
// with "\n"; assistant content may be null), `tools`, `tool_choice` ("auto", or "none": the
// tools are left out), `response_format` (only {"type": "text"}), `chat_template_kwargs`
// (extra template variables). On error: `error` is the client's 400, its param the field and
// its message naming the element ("messages[2].content[0] ...").
Result<text::ChatRequest> read_chat_request(const nlohmann::ordered_json& body, ApiError& error);

}  // namespace prism::api

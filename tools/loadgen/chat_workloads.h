// tools/loadgen/chat_workloads.h: the LLM workloads (POST /v1/chat/completions, stream=true).
//   chat:               one user message per request, input and output lengths drawn from
//                       distributions; measured by TTFT, ITL and TPOT.
//   chat-shared-prefix: conversations of several turns whose requests share long system
//                       prompts and their own history, to exercise prefix caching.
// The meter reads OpenAI's streamed chunks; it is exposed for tests.
#pragma once

#include <memory>

#include "tools/loadgen/workload.h"

namespace prism::tools::loadgen {

std::unique_ptr<Workload> make_chat(const WorkloadOptions& options);
std::unique_ptr<Workload> make_chat_shared_prefix(const WorkloadOptions& options);

// Reads chat.completion.chunk events: a chunk with content (delta.content,
// delta.reasoning_content, or text for /v1/completions) is an output token; the first sets
// "ttft", the gaps between them are "itl"; "tpot" = (e2e - ttft) / (output tokens - 1).
// Output tokens are usage.completion_tokens when the server sends usage, else the content
// chunks. Malformed: an event that is not JSON, an error event, or no data: [DONE].
std::unique_ptr<ResponseMeter> make_chat_meter(Units expected);

}  // namespace prism::tools::loadgen

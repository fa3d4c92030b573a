// api/sse.h: Server-Sent Events over a StreamWriter, as OpenAI streams them: each event is
// "data: <json>\n\n", the stream ends with "data: [DONE]\n\n". One event per chunk, so each
// is flushed as it is produced.
#pragma once

#include <string>
#include <string_view>

#include "api/http_types.h"

namespace prism::api {

// One event. A data with newlines becomes several data: lines (the client joins them with
// '\n'); event: an optional "event:" name (OpenAI's Responses API uses them, Chat does not).
std::string sse_event(std::string_view data, std::string_view event = {});
// "data: [DONE]\n\n": the end marker of OpenAI streams.
std::string_view sse_done();
// Starts a text/event-stream response (Cache-Control: no-cache; X-Accel-Buffering: no, so
// proxies do not hold events back).
StreamWriter start_sse(Responder& responder);

}  // namespace prism::api

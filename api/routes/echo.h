// api/routes/echo.h: the routes of the echo test engine (task "echo"), in Prism's extension
// namespace. They carry any JSON through the whole serving path (parse, queue, batch,
// replica, respond) so tests and the overhead benchmark exercise the framework alone.
//   POST /v1/prism/echo     {"model", "input": <any JSON>, "priority"?: "online"|"bulk",
//                            "stream"?: bool}
//                           → {"id", "object": "prism.echo", "model", "output": <input>}
//                           stream: SSE, one "prism.echo.chunk" event per element of an input
//                           array (the input itself otherwise), then "data: [DONE]".
//                           An input string "error:MESSAGE" makes the engine fail that request
//                           (400 with MESSAGE): per-request failure, end to end.
//   GET  /v1/prism/echo/ws?model=NAME  WebSocket: each text message (a JSON value) comes back
//                           as {"object": "prism.echo", "model", "output": <value>}; binary
//                           messages come back unchanged; errors as {"error": {...}} messages.
// Must not: block an I/O thread.
#pragma once

#include "api/router.h"
#include "serving/deployment_set.h"

namespace prism::api {

// `deployments` is not owned and must outlive the server.
void add_echo_routes(Router& router, serving::DeploymentSet& deployments);

}  // namespace prism::api

// api/errors.h: every error a client sees, in OpenAI's JSON shape
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// with its HTTP status. Prism Status codes map to HTTP statuses here and only here
// (api/errors.cpp). Messages are for users: they name the field or limit, never internals.
#pragma once

#include <string>
#include <string_view>

#include "api/http_types.h"
#include "base/status.h"

namespace prism::api {

struct ApiError {
  int status = 500;
  std::string message;
  std::string type = "server_error";  // OpenAI's: invalid_request_error, server_error, ...
  std::string param;                  // the offending field; "" serialises as null
  std::string code;                   // machine-readable; "" serialises as null
  int retry_after_s = 0;              // > 0: a Retry-After header (429, 503)
  std::string allow;                  // non-empty: an Allow header (405)
};

// The JSON body of an error.
std::string error_json(const ApiError& e);
// The Response for an error: JSON body plus Retry-After / Allow headers where set.
Response error_response(const ApiError& e);

// The one Status -> HTTP mapping: invalid_argument, out_of_range, failed_precondition -> 400;
// not_found -> 404; resource_exhausted -> 429 (Retry-After: 1); unavailable -> 503;
// unimplemented -> 501; internal, data_loss -> 500 with a generic message (their text may
// carry paths or internals: the caller logs it with the request id, the client never sees it).
int http_status_for(StatusCode code);
ApiError from_status(const Status& s, std::string param = {});

// 400 for one request field: "Invalid value for 'temperature': must be between 0 and 2."
ApiError invalid_field(std::string_view field, std::string_view problem);
// 400 for a body that is not JSON; detail says where parsing failed.
ApiError invalid_json(std::string_view detail);
// 400 for any other malformed request (bad request line, bad multipart, ...).
ApiError bad_request(std::string message, std::string code = "invalid_request");
ApiError unauthorized(bool key_given);
ApiError route_not_found(std::string_view method, std::string_view path);
ApiError model_not_found(std::string_view model);
ApiError method_not_allowed(std::string_view method, std::string_view path, std::string allow);
ApiError body_too_large(std::size_t limit_bytes);
ApiError headers_too_large(std::size_t limit_bytes);
ApiError overloaded(int retry_after_s = 1, std::string_view what = "the server");
ApiError server_error();  // 500, generic: "The server had an error while processing your request."
ApiError not_ready(std::string_view what);
ApiError request_timeout();  // 504: the handler did not answer within the request deadline

}  // namespace prism::api

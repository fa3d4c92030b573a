// api/errors.cpp: OpenAI-shaped error bodies and the one Status -> HTTP status mapping.
#include "api/errors.h"

#include <nlohmann/json.hpp>

namespace prism::api {

namespace {

ApiError make(int status, std::string message, std::string type, std::string code,
              std::string param = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

constexpr const char* kInvalidRequest = "invalid_request_error";
constexpr const char* kServerError = "server_error";

}  // namespace

std::string error_json(const ApiError& e) {
  nlohmann::json j;
  j["error"] = {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param)},
                {"code", e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code)}};
  // replace: a message quoting invalid UTF-8 from the client must not make dump() throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Response error_response(const ApiError& e) {
  Response r = Response::json(e.status, error_json(e));
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  if (!e.allow.empty()) r.headers.emplace_back("Allow", e.allow);
  return r;
}

int http_status_for(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return 200;
    case StatusCode::invalid_argument:
    case StatusCode::out_of_range:
    case StatusCode::failed_precondition: return 400;
    case StatusCode::not_found: return 404;
    case StatusCode::resource_exhausted: return 429;
    case StatusCode::unimplemented: return 501;
    case StatusCode::unavailable: return 503;
    case StatusCode::deadline_exceeded: return 504;
    case StatusCode::cancelled: return 499;  // nginx's "client closed request": nobody reads it
    case StatusCode::data_loss:
    case StatusCode::internal: return 500;
  }
  return 500;
}

ApiError from_status(const Status& s, std::string param) {
  const int status = http_status_for(s.code());
  switch (status) {
    case 400: return make(400, s.message(), kInvalidRequest, "invalid_value", std::move(param));
    case 404: return make(404, s.message(), kInvalidRequest, "not_found", std::move(param));
    case 429: {
      ApiError e = make(429, s.message(), "rate_limit_error", "rate_limit_exceeded");
      e.retry_after_s = 1;
      return e;
    }
    case 501: return make(501, s.message(), kInvalidRequest, "not_implemented", std::move(param));
    case 504: return request_timeout();
    case 499: return make(499, s.message(), kInvalidRequest, "cancelled");
    case 503: {
      ApiError e = make(503, s.message(), kServerError, "service_unavailable");
      e.retry_after_s = 1;
      return e;
    }
    default: return server_error();
  }
}

ApiError invalid_field(std::string_view field, std::string_view problem) {
  return make(400, "Invalid value for '" + std::string(field) + "': " + std::string(problem),
              kInvalidRequest, "invalid_value", std::string(field));
}

ApiError invalid_json(std::string_view detail) {
  return make(400, "The request body is not valid JSON: " + std::string(detail), kInvalidRequest,
              "invalid_json");
}

ApiError bad_request(std::string message, std::string code) {
  return make(400, std::move(message), kInvalidRequest, std::move(code));
}

ApiError unauthorized(bool key_given) {
  return make(401,
              key_given ? "Incorrect API key provided."
                        : "You didn't provide an API key. Send it in an Authorization header: "
                          "'Authorization: Bearer YOUR_KEY'.",
              kInvalidRequest, "invalid_api_key");
}

ApiError route_not_found(std::string_view method, std::string_view path) {
  return make(404, "Unknown request URL: " + std::string(method) + " " + std::string(path) + ".",
              kInvalidRequest, "unknown_url");
}

ApiError model_not_found(std::string_view model) {
  return make(404, "The model '" + std::string(model) + "' does not exist.", kInvalidRequest,
              "model_not_found", "model");
}

ApiError method_not_allowed(std::string_view method, std::string_view path, std::string allow) {
  ApiError e = make(405,
                    "Method " + std::string(method) + " is not allowed on " + std::string(path) +
                        " (allowed: " + allow + ").",
                    kInvalidRequest, "method_not_allowed");
  e.allow = std::move(allow);
  return e;
}

ApiError body_too_large(std::size_t limit_bytes) {
  return make(413, "The request body is larger than the limit of " + std::to_string(limit_bytes) + " bytes.",
              kInvalidRequest, "request_too_large");
}

ApiError headers_too_large(std::size_t limit_bytes) {
  return make(431,
              "The request headers are larger than the limit of " + std::to_string(limit_bytes) + " bytes.",
              kInvalidRequest, "headers_too_large");
}

ApiError overloaded(int retry_after_s, std::string_view what) {
  ApiError e = make(429, std::string(what) + " is overloaded: too many requests. Retry later.",
                    "rate_limit_error", "rate_limit_exceeded");
  e.retry_after_s = retry_after_s > 0 ? retry_after_s : 1;
  return e;
}

ApiError server_error() {
  return make(500, "The server had an error while processing your request.", kServerError,
              "internal_error");
}

ApiError not_ready(std::string_view what) {
  ApiError e = make(503, std::string(what), kServerError, "service_unavailable");
  e.retry_after_s = 1;
  return e;
}

ApiError request_timeout() {
  return make(504, "The request did not complete within the server's deadline.", kServerError,
              "timeout");
}

}  // namespace prism::api

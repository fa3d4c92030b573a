// Status names and the PRISM_CHECK failure path.
#include "base/status.h"

#include "base/check.h"

namespace prism {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::not_found: return "not_found";
    case StatusCode::out_of_range: return "out_of_range";
    case StatusCode::unimplemented: return "unimplemented";
    case StatusCode::data_loss: return "data_loss";
    case StatusCode::failed_precondition: return "failed_precondition";
    case StatusCode::resource_exhausted: return "resource_exhausted";
    case StatusCode::unavailable: return "unavailable";
    case StatusCode::internal: return "internal";
    case StatusCode::cancelled: return "cancelled";
    case StatusCode::deadline_exceeded: return "deadline_exceeded";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

namespace detail {
void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "PRISM_CHECK failed at %s:%d: %s %s\n", file, line, cond, msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace prism

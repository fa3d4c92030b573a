// base/: what every layer shares, api/ included (which must not link runtime/).
// Status and Result<T>: how environment-dependent work (load, parse, validate, I/O) reports
// failure. Prism code does not throw; hot paths use PRISM_CHECK instead (see STYLE.md).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace prism {

enum class StatusCode {
  ok,
  invalid_argument,    // the caller's input is wrong
  not_found,           // a file, tensor, key or model that does not exist
  out_of_range,        // an index or size past a limit
  unimplemented,       // a valid request for something Prism does not do (yet)
  data_loss,           // a file exists but its bytes are corrupt or truncated
  failed_precondition, // the system is not in a state to do this
  resource_exhausted,  // out of memory, queue full, too many requests
  unavailable,         // not ready, shutting down
  cancelled,           // the caller went away (a client disconnected)
  deadline_exceeded,   // the request's deadline passed before it could finish
  internal,            // a bug or an unexpected library failure
};

std::string_view status_code_name(StatusCode code);

class Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: <message>", or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::invalid_argument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::not_found, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::out_of_range, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::unimplemented, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::data_loss, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::failed_precondition, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::resource_exhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::unavailable, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::internal, std::move(m)}; }
inline Status cancelled_error(std::string m) { return {StatusCode::cancelled, std::move(m)}; }
inline Status deadline_exceeded_error(std::string m) { return {StatusCode::deadline_exceeded, std::move(m)}; }

// A value or the Status that explains why there is none. Shaped like std::expected so it
// can become an alias under C++23.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}                // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {          // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::internal, "Result built from an ok Status");
  }

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return check(), std::get<0>(v_); }
  const T& value() const& { return check(), std::get<0>(v_); }
  T&& value() && { return check(), std::move(std::get<0>(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // The error; an ok Status when there is a value.
  Status status() const { return has_value() ? Status() : std::get<1>(v_); }

 private:
  void check() const {
    if (!has_value()) {
      std::fprintf(stderr, "Result::value() on error: %s\n", std::get<1>(v_).to_string().c_str());
      std::abort();
    }
  }
  std::variant<T, Status> v_;
};

}  // namespace prism

#define PRISM_CONCAT_INNER_(a, b) a##b
#define PRISM_CONCAT_(a, b) PRISM_CONCAT_INNER_(a, b)

#define PRISM_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::prism::Status prism_status_ = (expr);      \
    if (!prism_status_.ok()) return prism_status_; \
  } while (0)

#define PRISM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.has_value()) return tmp.status();         \
  lhs = std::move(tmp).value()

// PRISM_ASSIGN_OR_RETURN(auto x, load()); or PRISM_ASSIGN_OR_RETURN(w.q, get(...));
#define PRISM_ASSIGN_OR_RETURN(lhs, expr) \
  PRISM_ASSIGN_OR_RETURN_IMPL_(PRISM_CONCAT_(prism_result_, __LINE__), lhs, expr)

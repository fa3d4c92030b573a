// serving/request.cpp: exactly-once completion and the framework's own error statuses.
#include "serving/request.h"

#include "serving/deployment.h"

namespace prism::serving {

std::string_view lane_name(Lane lane) { return lane == Lane::online ? "online" : "bulk"; }

Request::Request(PayloadPtr in, Completion on_complete) : input(std::move(in)), on_complete_(std::move(on_complete)) {}

Request::~Request() = default;

bool Request::complete_with(Status status, std::string_view metrics_label) {
  if (done_.exchange(true, std::memory_order_acq_rel)) return false;
  if (owner_ != nullptr) owner_->on_request_done(*this, metrics_label);
  // Move the callback out so whatever it captured is released when it returns.
  Completion cb = std::move(on_complete_);
  if (cb) cb(Result<PayloadPtr>(std::move(status)));
  return true;
}

bool Request::complete(Result<PayloadPtr> result) {
  if (!result.has_value()) {
    Status s = result.status();
    std::string_view label = status_code_name(s.code());
    return complete_with(std::move(s), label);
  }
  if (done_.exchange(true, std::memory_order_acq_rel)) return false;
  if (owner_ != nullptr) owner_->on_request_done(*this, "ok");
  Completion cb = std::move(on_complete_);
  if (cb) cb(std::move(result));
  return true;
}

void Request::emit(PayloadPtr chunk) {
  if (completed() || !on_partial) return;
  on_partial(std::move(chunk));
}

bool Request::complete_cancelled() {
  return complete_with(cancelled_error("the client went away"), "cancelled");
}

bool Request::complete_deadline_exceeded() {
  return complete_with(deadline_exceeded_error("the request waited past its deadline"),
                       "deadline_exceeded");
}

RequestPtr make_request(PayloadPtr input, Completion on_complete) {
  return std::make_shared<Request>(std::move(input), std::move(on_complete));
}

}  // namespace prism::serving

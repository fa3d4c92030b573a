// runtime/compute_gate.cpp: see compute_gate.h.
#include "runtime/compute_gate.h"

#include <algorithm>

#include "runtime/threads.h"

namespace prism {
namespace {

// The lease the calling thread holds (of any gate): a nested acquire must not wait for itself.
thread_local int t_held = 0;          // leases admitted and not released (0 or 1)
thread_local int t_held_threads = 0;  // their threads

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

ComputeGate::ComputeGate(int capacity) : capacity_(std::max(1, capacity)) {}

ComputeGate& ComputeGate::process() {
  static ComputeGate gate(num_threads());
  return gate;
}

ComputeGate::Lease ComputeGate::acquire(int threads) {
  if (t_held > 0) return Lease(nullptr, 0, 0.0);
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  threads = std::clamp(threads, 1, capacity_);
  const uint64_t ticket = next_ticket_++;
  const auto admissible = [&] { return ticket == serving_ && (!enabled_ || in_use_ + threads <= capacity_); };
  const bool waits = !admissible();
  if (waits) cv_.wait(lock, admissible);
  ++serving_;
  in_use_ += threads;
  max_in_use_ = std::max(max_in_use_, in_use_);
  lock.unlock();
  cv_.notify_all();  // the next ticket may fit beside this one
  ++t_held;
  t_held_threads = threads;
  return Lease(this, threads, waits ? seconds_since(start) : 0.0);
}

void ComputeGate::release(int threads) {
  --t_held;
  t_held_threads = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= threads;
  }
  cv_.notify_all();
}

void ComputeGate::set_capacity(int capacity) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = std::max(1, capacity);
  }
  cv_.notify_all();
}

void ComputeGate::set_enabled(bool enabled) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    enabled_ = enabled;
  }
  cv_.notify_all();
}

bool ComputeGate::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

int ComputeGate::threads_leased_by_this_thread() { return t_held > 0 ? t_held_threads : 0; }

int ComputeGate::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

int ComputeGate::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

int ComputeGate::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(next_ticket_ - serving_);
}

int ComputeGate::max_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_in_use_;
}

void ComputeGate::reset_max_in_use() {
  std::lock_guard<std::mutex> lock(mu_);
  max_in_use_ = in_use_;
}

ComputeGate::Lease::Lease(ComputeGate* gate, int threads, double waited_seconds)
    : gate_(gate), threads_(threads), waited_seconds_(waited_seconds), admitted_(std::chrono::steady_clock::now()) {}

ComputeGate::Lease::Lease(Lease&& other) noexcept
    : gate_(other.gate_), threads_(other.threads_), waited_seconds_(other.waited_seconds_), admitted_(other.admitted_) {
  other.gate_ = nullptr;
}

ComputeGate::Lease::~Lease() {
  if (gate_ != nullptr) gate_->release(threads_);
}

double ComputeGate::Lease::held_seconds() const { return seconds_since(admitted_); }

}  // namespace prism

// serving/in_process_work_queue.h: the WorkQueue of one process (serving/work_queue.h) with
// the same semantics as the Redis one, for single-machine jobs and unit tests. Thread-safe:
// producers and consumers may share one instance. Not durable: it lives as long as the object.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "serving/work_queue.h"

namespace prism::serving {

class InProcessWorkQueue final : public WorkQueue {
 public:
  // now_ms: the clock idle times are measured with (default: steady_clock in ms); tests pass
  // a fake one to age items without sleeping.
  explicit InProcessWorkQueue(std::function<int64_t()> now_ms = {});

  Status add(std::span<const WorkItem> items, int64_t expected_total) override;
  Status close() override;
  Result<std::vector<ClaimedItem>> claim(const std::string& consumer, const ClaimOptions& options) override;
  Result<int64_t> complete(const std::string& consumer, std::span<const ClaimedItem> items,
                           std::span<const std::string> results) override;
  Result<WorkProgress> progress() override;
  Result<std::vector<std::optional<std::string>>> results(std::span<const std::string> keys) override;
  Result<std::string> set_attribute_once(const std::string& name, const std::string& value) override;
  Result<std::optional<std::string>> attribute(const std::string& name) override;

 private:
  enum class State { waiting, pending, done };
  struct Entry {
    std::string key;
    std::string payload;   // dropped once done
    State state = State::waiting;
    std::string consumer;  // the consumer it is pending with
    int64_t delivered_ms = 0;
  };
  // Delivers entries_[seq] to consumer at `now` into out. Caller holds mu_.
  void deliver_locked(int64_t seq, const std::string& consumer, int64_t now, std::vector<ClaimedItem>& out);

  const std::function<int64_t()> now_ms_;
  mutable std::mutex mu_;
  std::condition_variable added_;                          // signalled by add and close
  std::vector<Entry> entries_;                             // guarded by mu_; index = receipt
  std::unordered_map<std::string, int64_t> seq_of_key_;    // guarded by mu_
  size_t next_new_ = 0;                                    // guarded by mu_; first never delivered
  std::set<int64_t> pending_;                              // guarded by mu_; seqs, oldest first
  std::unordered_map<std::string, std::string> results_;   // guarded by mu_
  std::map<std::string, std::string> attributes_;          // guarded by mu_
  bool closed_ = false;                                    // guarded by mu_
};

}  // namespace prism::serving

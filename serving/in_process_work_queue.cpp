// serving/in_process_work_queue.cpp: the in-process WorkQueue. Every call takes the one
// mutex; claim may wait on a condition variable for new items.
#include "serving/in_process_work_queue.h"

#include <charconv>
#include <chrono>

namespace prism::serving {
namespace {

int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

InProcessWorkQueue::InProcessWorkQueue(std::function<int64_t()> now_ms)
    : now_ms_(now_ms ? std::move(now_ms) : std::function<int64_t()>(steady_now_ms)) {}

Status InProcessWorkQueue::add(std::span<const WorkItem> items, int64_t expected_total) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return failed_precondition("the queue is closed: no more items can be added");
    if (expected_total != static_cast<int64_t>(entries_.size()))
      return failed_precondition("the queue holds " + std::to_string(entries_.size()) + " items, not " +
                                 std::to_string(expected_total) + ": another producer added items");
    // Check everything before changing anything: all or none.
    std::unordered_map<std::string, int64_t> batch_keys;
    for (const WorkItem& item : items) {
      if (item.key.empty()) return invalid_argument("a work item needs a non-empty key");
      if (seq_of_key_.count(item.key) || !batch_keys.emplace(item.key, 0).second)
        return invalid_argument("work item key '" + item.key + "' was added before");
    }
    for (const WorkItem& item : items) {
      seq_of_key_.emplace(item.key, static_cast<int64_t>(entries_.size()));
      entries_.push_back({item.key, item.payload, State::waiting, {}, 0});
    }
  }
  added_.notify_all();
  return {};
}

Status InProcessWorkQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  added_.notify_all();
  return {};
}

void InProcessWorkQueue::deliver_locked(int64_t seq, const std::string& consumer, int64_t now,
                                        std::vector<ClaimedItem>& out) {
  Entry& e = entries_[seq];
  const bool reclaimed = e.state == State::pending;
  e.state = State::pending;
  e.consumer = consumer;
  e.delivered_ms = now;
  pending_.insert(seq);
  out.push_back({e.key, e.payload, std::to_string(seq), reclaimed});
}

Result<std::vector<ClaimedItem>> InProcessWorkQueue::claim(const std::string& consumer, const ClaimOptions& options) {
  if (consumer.empty()) return invalid_argument("a consumer needs a non-empty name");
  if (options.max_items <= 0) return invalid_argument("max_items must be positive");
  std::vector<ClaimedItem> out;
  std::unique_lock lock(mu_);
  const int64_t now = now_ms_();
  if (options.min_idle_ms >= 0) {
    // Collect first: deliver_locked inserts into pending_ (the same seqs, so no new ones).
    std::vector<int64_t> stale;
    for (int64_t seq : pending_) {
      if (static_cast<int64_t>(stale.size()) == options.max_items) break;
      if (now - entries_[seq].delivered_ms >= options.min_idle_ms) stale.push_back(seq);
    }
    for (int64_t seq : stale) deliver_locked(seq, consumer, now, out);
  }
  auto take_new = [&] {
    while (static_cast<int64_t>(out.size()) < options.max_items && next_new_ < entries_.size()) {
      const int64_t seq = static_cast<int64_t>(next_new_++);
      if (entries_[seq].state == State::waiting) deliver_locked(seq, consumer, now, out);
    }
  };
  take_new();
  if (out.empty() && options.wait_ms > 0 && !closed_) {
    added_.wait_for(lock, std::chrono::milliseconds(options.wait_ms),
                    [&] { return closed_ || next_new_ < entries_.size(); });
    take_new();
  }
  return out;
}

Result<int64_t> InProcessWorkQueue::complete(const std::string& consumer, std::span<const ClaimedItem> items,
                                             std::span<const std::string> results) {
  if (items.size() != results.size())
    return invalid_argument(std::to_string(items.size()) + " items but " + std::to_string(results.size()) + " results");
  std::lock_guard lock(mu_);
  // Check every receipt before changing anything: all or none, as Redis's MULTI/EXEC.
  std::vector<int64_t> seqs;
  seqs.reserve(items.size());
  for (const ClaimedItem& item : items) {
    int64_t seq = -1;
    const char* end = item.receipt.data() + item.receipt.size();
    auto [p, ec] = std::from_chars(item.receipt.data(), end, seq);
    if (ec != std::errc() || p != end || seq < 0 || seq >= static_cast<int64_t>(entries_.size()) ||
        entries_[seq].key != item.key)
      return invalid_argument("'" + item.receipt + "' is not the receipt of item '" + item.key + "'");
    seqs.push_back(seq);
  }
  int64_t completed = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Entry& e = entries_[seqs[i]];
    if (results_.emplace(e.key, results[i]).second) ++completed;
    if (e.state == State::pending) pending_.erase(seqs[i]);
    e.state = State::done;
    e.payload = std::string();
  }
  return completed;
}

Result<WorkProgress> InProcessWorkQueue::progress() {
  std::lock_guard lock(mu_);
  WorkProgress p;
  p.total = static_cast<int64_t>(entries_.size());
  p.done = static_cast<int64_t>(results_.size());
  p.pending = static_cast<int64_t>(pending_.size());
  p.closed = closed_;
  for (int64_t seq : pending_) ++p.pending_by_consumer[entries_[seq].consumer];
  return p;
}

Result<std::vector<std::optional<std::string>>> InProcessWorkQueue::results(std::span<const std::string> keys) {
  std::lock_guard lock(mu_);
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) {
    auto it = results_.find(key);
    out.push_back(it == results_.end() ? std::nullopt : std::optional<std::string>(it->second));
  }
  return out;
}

Result<std::string> InProcessWorkQueue::set_attribute_once(const std::string& name, const std::string& value) {
  std::lock_guard lock(mu_);
  return attributes_.emplace(name, value).first->second;
}

Result<std::optional<std::string>> InProcessWorkQueue::attribute(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = attributes_.find(name);
  if (it == attributes_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

}  // namespace prism::serving

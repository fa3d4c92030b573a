// serving/work_queue.h: a durable queue of work items for jobs split across workers (bulk
// embedding jobs today; pipeline hops and long-form chunks later). One interface
// (ARCHITECTURE.md "Beyond one machine"), two implementations: in-process
// (serving/in_process_work_queue.h: one machine, unit tests) and Redis Streams with a
// consumer group (serving/redis_work_queue.h: workers on many machines).
// It moves opaque bytes: it knows nothing of documents, tokens or vectors.
// NOTE: the guarantees every implementation keeps:
//   - an item is delivered to one consumer at a time; it stays pending (delivered, not done)
//     until completed, so a consumer that dies leaves it pending, and another consumer's
//     claim takes it over once it has been idle min_idle_ms;
//   - complete() stores the results and acknowledges the items atomically: after a crash an
//     item is either still pending or done with its result, never half done;
//   - the first result stored for an item wins: a slow consumer whose item was taken over
//     and completed by another never overwrites it (and is not counted twice);
//   - add() is all-or-nothing and checks how many items the producer thinks were added, so
//     a re-run or a second producer never adds an item twice.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace prism::serving {

struct WorkItem {
  std::string key;      // unique within the queue: the name its result is stored under
  std::string payload;  // opaque bytes
};

// One delivery of an item to a consumer.
struct ClaimedItem {
  std::string key;
  std::string payload;
  std::string receipt;  // the queue's handle of the item (Redis: the stream entry id)
  bool reclaimed = false;  // taken over from a pending state (a consumer that died or stalled)
};

struct ClaimOptions {
  int64_t max_items = 64;
  // Pending items of any consumer, idle (not delivered again, not completed) for at least
  // this long, are taken over by this claim before new items are read. Negative: never.
  int64_t min_idle_ms = 30000;
  // When nothing is claimable, wait up to this long for new items (0: return at once).
  // NOTE: a wait does not end early for items that become idle: callers poll.
  int64_t wait_ms = 0;
};

struct WorkProgress {
  int64_t total = 0;    // items added
  int64_t done = 0;     // items completed (result stored and acknowledged)
  int64_t pending = 0;  // items delivered and not completed
  bool closed = false;  // the producer said no more items will be added
  std::map<std::string, int64_t> pending_by_consumer;  // consumers holding pending items
  bool finished() const { return closed && done == total; }
};

// Implementations say whether an instance may be shared between threads.
class WorkQueue {
 public:
  virtual ~WorkQueue() = default;

  // Appends items in order, all or none. expected_total is how many items the caller believes
  // the queue holds: failed_precondition when it does not (another producer added some), or
  // when the queue is closed. Keys must be non-empty and unique (the in-process queue checks
  // uniqueness; Redis trusts the producer, whom expected_total keeps from adding twice).
  virtual Status add(std::span<const WorkItem> items, int64_t expected_total) = 0;
  // No more items will be added: consumers finish once every item is done.
  virtual Status close() = 0;

  // Stale pending items (see ClaimOptions::min_idle_ms) then new ones, at most max_items in
  // all, now pending with `consumer`. Empty when there is nothing to do (yet).
  virtual Result<std::vector<ClaimedItem>> claim(const std::string& consumer, const ClaimOptions& options) = 0;

  // Stores results[i] as the result of items[i] and acknowledges the items, atomically.
  // Items completed before (by anyone) keep their first result. Returns how many items this
  // call completed (the others were done already). items.size() must equal results.size().
  virtual Result<int64_t> complete(const std::string& consumer, std::span<const ClaimedItem> items,
                                   std::span<const std::string> results) = 0;

  virtual Result<WorkProgress> progress() = 0;

  // The stored results of `keys`, in order; nullopt for a key not done.
  virtual Result<std::vector<std::optional<std::string>>> results(std::span<const std::string> keys) = 0;

  // Attributes of the job (e.g. the embedding space its results are in): the first value
  // set for a name wins. Returns the value now held, which is `value` or the earlier one.
  virtual Result<std::string> set_attribute_once(const std::string& name, const std::string& value) = 0;
  virtual Result<std::optional<std::string>> attribute(const std::string& name) = 0;
};

}  // namespace prism::serving

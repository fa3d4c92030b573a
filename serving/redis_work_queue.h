// serving/redis_work_queue.h: the WorkQueue on Redis Streams with a consumer group, so
// workers on many machines share one job (serving/work_queue.h states the guarantees).
// Layout of queue NAME (the {NAME} hash tag keeps every key on one Redis Cluster slot, which
// MULTI needs):
//   prism:queue:{NAME}:items       stream; one entry per item, fields "key" and "payload";
//                                  consumer group "workers"
//   prism:queue:{NAME}:results     hash: item key -> result bytes
//   prism:queue:{NAME}:meta        hash: "total" items added, "closed" = 1 once closed
//   prism:queue:{NAME}:attributes  hash: set_attribute_once
// NOTE: claim = XAUTOCLAIM (stale pending entries, min-idle-time) then XREADGROUP ">" (new
// ones); complete = MULTI, HSETNX per item, XACK, EXEC: the first result wins and the ack
// goes with it; add = WATCH meta, check "total", MULTI, XADD..., HINCRBY total, EXEC.
// Nothing is ever deleted: results stay until the job's keys are removed (e.g. redis-cli DEL).
// One instance holds one connection: not thread-safe, use one per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "serving/work_queue.h"

struct redisContext;

namespace prism::serving {

struct RedisEndpoint {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string to_string() const;  // "host:port"
};

// "HOST:PORT", "HOST" (port 6379) or "[IPv6]:PORT"; invalid_argument otherwise.
Result<RedisEndpoint> parse_redis_endpoint(std::string_view text);

// Queue names are 1-200 characters of [A-Za-z0-9._-]; invalid_argument otherwise.
Status check_queue_name(std::string_view name);

class RedisWorkQueue final : public WorkQueue {
 public:
  // Connects (unavailable, naming the endpoint, when it cannot) and creates the stream and
  // its consumer group when missing. A key of the queue holding another type is
  // failed_precondition.
  static Result<std::unique_ptr<RedisWorkQueue>> open(const RedisEndpoint& endpoint, const std::string& name);
  ~RedisWorkQueue() override;

  Status add(std::span<const WorkItem> items, int64_t expected_total) override;
  Status close() override;
  Result<std::vector<ClaimedItem>> claim(const std::string& consumer, const ClaimOptions& options) override;
  Result<int64_t> complete(const std::string& consumer, std::span<const ClaimedItem> items,
                           std::span<const std::string> results) override;
  Result<WorkProgress> progress() override;
  Result<std::vector<std::optional<std::string>>> results(std::span<const std::string> keys) override;
  Result<std::string> set_attribute_once(const std::string& name, const std::string& value) override;
  Result<std::optional<std::string>> attribute(const std::string& name) override;

  static std::string key_prefix(std::string_view name);  // "prism:queue:{NAME}:"
  static constexpr const char* kGroup = "workers";

 private:
  class Connection;
  RedisWorkQueue(std::unique_ptr<Connection> connection, const std::string& name);

  std::unique_ptr<Connection> connection_;
  const std::string stream_key_, results_key_, meta_key_, attributes_key_;
  std::string autoclaim_cursor_ = "0-0";  // where the next XAUTOCLAIM scan starts
};

}  // namespace prism::serving

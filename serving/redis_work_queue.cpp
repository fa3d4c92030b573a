// serving/redis_work_queue.cpp: the Redis Streams WorkQueue over hiredis's synchronous API.
// Every method is one or two round trips: commands are pipelined, and the ones that must
// apply together run inside MULTI/EXEC.
#include "serving/redis_work_queue.h"

#include <hiredis/hiredis.h>

#include <sys/time.h>

#include <algorithm>
#include <charconv>
#include <optional>

namespace prism::serving {
namespace {

using Args = std::vector<std::string>;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

constexpr int kConnectTimeoutMs = 5000;
// Commands that do not block answer in well under a second; BLOCK waits are capped below it.
constexpr int kCommandTimeoutMs = 30000;
constexpr int64_t kMaxWaitMs = 10000;
constexpr size_t kKeysPerCommand = 1024;

timeval to_timeval(int ms) { return {ms / 1000, (ms % 1000) * 1000}; }

bool is_string(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}
std::string text(const redisReply* r) { return is_string(r) ? std::string(r->str, r->len) : std::string(); }
bool is_array(const redisReply* r, size_t min_elements = 0) {
  return r && r->type == REDIS_REPLY_ARRAY && r->elements >= min_elements;
}

// An integer reply, or a bulk string holding one (HGET), or `fallback` for nil.
std::optional<int64_t> integer(const redisReply* r, int64_t fallback = 0) {
  if (!r) return std::nullopt;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_NIL) return fallback;
  if (r->type != REDIS_REPLY_STRING) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(r->str, r->str + r->len, v);
  if (ec != std::errc() || p != r->str + r->len) return std::nullopt;
  return v;
}

}  // namespace

class RedisWorkQueue::Connection {
 public:
  explicit Connection(RedisEndpoint endpoint) : endpoint_(std::move(endpoint)) {}
  ~Connection() {
    if (ctx_) redisFree(ctx_);
  }

  Status connect() {
    ctx_ = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, to_timeval(kConnectTimeoutMs));
    if (!ctx_) return unavailable("redis " + endpoint_.to_string() + ": cannot allocate a connection");
    if (ctx_->err) return unavailable("cannot connect to redis at " + endpoint_.to_string() + ": " + ctx_->errstr);
    redisSetTimeout(ctx_, to_timeval(kCommandTimeoutMs));
    return {};
  }

  // Sends every command, then reads every reply: one round trip. Error replies come back as
  // replies (inside MULTI they are what EXEC answers); a lost connection is unavailable.
  Result<std::vector<Reply>> pipeline(const std::vector<Args>& commands) {
    PRISM_RETURN_IF_ERROR(ensure_connected());
    std::vector<const char*> argv;
    std::vector<size_t> argvlen;
    for (const Args& args : commands) {
      argv.clear();
      argvlen.clear();
      for (const std::string& a : args) {
        argv.push_back(a.data());
        argvlen.push_back(a.size());
      }
      if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), argvlen.data()) != REDIS_OK)
        return lost();
    }
    std::vector<Reply> replies;
    replies.reserve(commands.size());
    for (size_t i = 0; i < commands.size(); ++i) {
      void* r = nullptr;
      if (redisGetReply(ctx_, &r) != REDIS_OK || !r) return lost();
      replies.emplace_back(static_cast<redisReply*>(r));
    }
    return replies;
  }

  // One command; an error reply is failed_precondition naming the command.
  Result<Reply> run(const Args& command) {
    PRISM_ASSIGN_OR_RETURN(std::vector<Reply> replies, pipeline({command}));
    PRISM_RETURN_IF_ERROR(check(command, replies[0].get()));
    return std::move(replies[0]);
  }

  Status check(const Args& command, const redisReply* r) const {
    if (r && r->type == REDIS_REPLY_ERROR)
      return failed_precondition("redis " + endpoint_.to_string() + ": " + command[0] + ": " +
                                 std::string(r->str, r->len));
    return {};
  }
  Status unexpected(const std::string& what) const {
    return internal_error("redis " + endpoint_.to_string() + ": unexpected reply to " + what);
  }

 private:
  // After an I/O error hiredis's context is dead; the next call reconnects once. Safe: every
  // operation of the queue may be repeated (claims re-deliver, completes are first-wins).
  Status ensure_connected() {
    if (!ctx_->err) return {};
    if (redisReconnect(ctx_) != REDIS_OK)
      return unavailable("cannot reconnect to redis at " + endpoint_.to_string() + ": " + ctx_->errstr);
    redisSetTimeout(ctx_, to_timeval(kCommandTimeoutMs));
    return {};
  }
  Status lost() const {
    return unavailable("redis " + endpoint_.to_string() + ": " + (ctx_->err ? ctx_->errstr : "connection lost"));
  }

  RedisEndpoint endpoint_;
  redisContext* ctx_ = nullptr;
};

std::string RedisEndpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<RedisEndpoint> parse_redis_endpoint(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("redis address '" + std::string(text) + "': " + why + " (expected HOST:PORT)");
  };
  RedisEndpoint ep;
  std::string_view host = text, port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("junk after ']'");
      port = rest.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) return bad("empty port");
    if (host.find(':') != std::string_view::npos) return bad("write an IPv6 address as [ADDRESS]:PORT");
  }
  if (host.empty()) return bad("empty host");
  ep.host = std::string(host);
  if (!port.empty()) {
    int p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535)
      return bad("port '" + std::string(port) + "' is not a number from 1 to 65535");
    ep.port = p;
  }
  return ep;
}

Status check_queue_name(std::string_view name) {
  if (name.empty() || name.size() > 200)
    return invalid_argument("job name must have 1 to 200 characters, got " + std::to_string(name.size()));
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok)
      return invalid_argument("job name '" + std::string(name) + "' may only hold letters, digits, '.', '_' and '-'");
  }
  return {};
}

std::string RedisWorkQueue::key_prefix(std::string_view name) { return "prism:queue:{" + std::string(name) + "}:"; }

RedisWorkQueue::RedisWorkQueue(std::unique_ptr<Connection> connection, const std::string& name)
    : connection_(std::move(connection)),
      stream_key_(key_prefix(name) + "items"),
      results_key_(key_prefix(name) + "results"),
      meta_key_(key_prefix(name) + "meta"),
      attributes_key_(key_prefix(name) + "attributes") {}

RedisWorkQueue::~RedisWorkQueue() = default;

Result<std::unique_ptr<RedisWorkQueue>> RedisWorkQueue::open(const RedisEndpoint& endpoint, const std::string& name) {
  PRISM_RETURN_IF_ERROR(check_queue_name(name));
  auto connection = std::make_unique<Connection>(endpoint);
  PRISM_RETURN_IF_ERROR(connection->connect());
  std::unique_ptr<RedisWorkQueue> q(new RedisWorkQueue(std::move(connection), name));
  // Creates the stream too (MKSTREAM); the group reads from the first entry ("0").
  const Args create = {"XGROUP", "CREATE", q->stream_key_, kGroup, "0", "MKSTREAM"};
  PRISM_ASSIGN_OR_RETURN(std::vector<Reply> r, q->connection_->pipeline({create}));
  if (r[0]->type == REDIS_REPLY_ERROR && std::string_view(r[0]->str, r[0]->len).starts_with("BUSYGROUP"))
    return q;  // the group exists: another process opened the queue first
  PRISM_RETURN_IF_ERROR(q->connection_->check(create, r[0].get()));
  return q;
}

Status RedisWorkQueue::add(std::span<const WorkItem> items, int64_t expected_total) {
  for (const WorkItem& item : items)
    if (item.key.empty()) return invalid_argument("a work item needs a non-empty key");
  // NOTE: WATCH makes EXEC fail when another client changed meta (added items, closed)
  // between our check and EXEC: then nothing was added.
  PRISM_ASSIGN_OR_RETURN(std::vector<Reply> r,
                         connection_->pipeline({{"WATCH", meta_key_}, {"HMGET", meta_key_, "total", "closed"}}));
  auto refuse = [&](Status s) -> Status {
    (void)connection_->pipeline({{"UNWATCH"}});
    return s;
  };
  if (Status s = connection_->check({"WATCH"}, r[0].get()); !s.ok()) return refuse(s);
  if (Status s = connection_->check({"HMGET"}, r[1].get()); !s.ok()) return refuse(s);
  if (!is_array(r[1].get(), 2)) return refuse(connection_->unexpected("HMGET meta"));
  const std::optional<int64_t> total = integer(r[1]->element[0]);
  const std::optional<int64_t> closed = integer(r[1]->element[1]);
  if (!total || !closed) return refuse(connection_->unexpected("HMGET meta (not integers)"));
  if (*closed) return refuse(failed_precondition("the queue is closed: no more items can be added"));
  if (*total != expected_total)
    return refuse(failed_precondition("the queue holds " + std::to_string(*total) + " items, not " +
                                      std::to_string(expected_total) + ": another producer added items"));
  if (items.empty()) return refuse(Status());
  std::vector<Args> commands;
  commands.reserve(items.size() + 3);
  commands.push_back({"MULTI"});
  for (const WorkItem& item : items)
    commands.push_back({"XADD", stream_key_, "*", "key", item.key, "payload", item.payload});
  commands.push_back({"HINCRBY", meta_key_, "total", std::to_string(items.size())});
  commands.push_back({"EXEC"});
  PRISM_ASSIGN_OR_RETURN(std::vector<Reply> t, connection_->pipeline(commands));
  for (size_t i = 0; i + 1 < t.size(); ++i) PRISM_RETURN_IF_ERROR(connection_->check(commands[i], t[i].get()));
  const redisReply* exec = t.back().get();
  if (exec->type == REDIS_REPLY_NIL)
    return failed_precondition("another producer changed the queue while items were added: nothing was added");
  PRISM_RETURN_IF_ERROR(connection_->check({"EXEC"}, exec));
  if (!is_array(exec, items.size() + 1)) return connection_->unexpected("EXEC of XADD");
  for (size_t i = 0; i < exec->elements; ++i)
    PRISM_RETURN_IF_ERROR(connection_->check(commands[i + 1], exec->element[i]));
  return {};
}

Status RedisWorkQueue::close() {
  PRISM_ASSIGN_OR_RETURN(Reply r, connection_->run({"HSET", meta_key_, "closed", "1"}));
  return {};
}

namespace {

// Appends the entries of a stream reply ([[id, [field, value, ...]], ...]) to out. Entries
// without fields (deleted from the stream while pending) are skipped.
bool parse_entries(const redisReply* entries, bool reclaimed, std::vector<ClaimedItem>& out) {
  if (!is_array(entries)) return false;
  for (size_t i = 0; i < entries->elements; ++i) {
    const redisReply* e = entries->element[i];
    if (!is_array(e, 2) || !is_string(e->element[0])) return false;
    const redisReply* fields = e->element[1];
    if (!is_array(fields)) continue;
    ClaimedItem item;
    item.receipt = text(e->element[0]);
    item.reclaimed = reclaimed;
    for (size_t f = 0; f + 1 < fields->elements; f += 2) {
      const std::string name = text(fields->element[f]);
      if (name == "key") item.key = text(fields->element[f + 1]);
      else if (name == "payload") item.payload = text(fields->element[f + 1]);
    }
    if (item.key.empty()) return false;
    out.push_back(std::move(item));
  }
  return true;
}

}  // namespace

Result<std::vector<ClaimedItem>> RedisWorkQueue::claim(const std::string& consumer, const ClaimOptions& options) {
  if (consumer.empty()) return invalid_argument("a consumer needs a non-empty name");
  if (options.max_items <= 0) return invalid_argument("max_items must be positive");
  std::vector<ClaimedItem> out;
  if (options.min_idle_ms >= 0) {
    // NOTE: each XAUTOCLAIM scans a window of the pending list from the cursor; the loop
    // stops at the end of the list (cursor 0-0, where the next claim starts again) or when
    // enough items were taken, so one claim scans the list at most once.
    do {
      const int64_t want = options.max_items - static_cast<int64_t>(out.size());
      PRISM_ASSIGN_OR_RETURN(Reply r, connection_->run({"XAUTOCLAIM", stream_key_, kGroup, consumer,
                                                        std::to_string(options.min_idle_ms), autoclaim_cursor_,
                                                        "COUNT", std::to_string(want)}));
      if (!is_array(r.get(), 2) || !is_string(r->element[0])) return connection_->unexpected("XAUTOCLAIM");
      autoclaim_cursor_ = text(r->element[0]);
      if (!parse_entries(r->element[1], /*reclaimed=*/true, out))
        return connection_->unexpected("XAUTOCLAIM (entries)");
    } while (autoclaim_cursor_ != "0-0" && static_cast<int64_t>(out.size()) < options.max_items);
  }
  if (static_cast<int64_t>(out.size()) < options.max_items) {
    Args read = {"XREADGROUP", "GROUP", kGroup, consumer, "COUNT",
                 std::to_string(options.max_items - static_cast<int64_t>(out.size()))};
    if (out.empty() && options.wait_ms > 0) {
      read.push_back("BLOCK");
      read.push_back(std::to_string(std::min(options.wait_ms, kMaxWaitMs)));
    }
    read.insert(read.end(), {"STREAMS", stream_key_, ">"});
    PRISM_ASSIGN_OR_RETURN(Reply r, connection_->run(read));
    if (r->type != REDIS_REPLY_NIL) {  // nil: nothing new (within the wait)
      if (!is_array(r.get(), 1) || !is_array(r->element[0], 2)) return connection_->unexpected("XREADGROUP");
      if (!parse_entries(r->element[0]->element[1], /*reclaimed=*/false, out))
        return connection_->unexpected("XREADGROUP (entries)");
    }
  }
  return out;
}

Result<int64_t> RedisWorkQueue::complete(const std::string& consumer, std::span<const ClaimedItem> items,
                                         std::span<const std::string> results) {
  if (items.size() != results.size())
    return invalid_argument(std::to_string(items.size()) + " items but " + std::to_string(results.size()) + " results");
  if (items.empty()) return int64_t(0);
  for (const ClaimedItem& item : items)
    if (item.key.empty() || item.receipt.empty()) return invalid_argument("a completed item needs its key and receipt");
  std::vector<Args> commands;
  commands.reserve(items.size() + 3);
  commands.push_back({"MULTI"});
  for (size_t i = 0; i < items.size(); ++i) commands.push_back({"HSETNX", results_key_, items[i].key, results[i]});
  Args ack = {"XACK", stream_key_, kGroup};
  for (const ClaimedItem& item : items) ack.push_back(item.receipt);
  commands.push_back(std::move(ack));
  commands.push_back({"EXEC"});
  PRISM_ASSIGN_OR_RETURN(std::vector<Reply> t, connection_->pipeline(commands));
  for (size_t i = 0; i < t.size(); ++i) PRISM_RETURN_IF_ERROR(connection_->check(commands[i], t[i].get()));
  const redisReply* exec = t.back().get();
  if (!is_array(exec, items.size() + 1)) return connection_->unexpected("EXEC of HSETNX/XACK");
  int64_t completed = 0;
  for (size_t i = 0; i < exec->elements; ++i) {
    PRISM_RETURN_IF_ERROR(connection_->check(commands[i + 1], exec->element[i]));
    if (i < items.size() && exec->element[i]->type == REDIS_REPLY_INTEGER) completed += exec->element[i]->integer;
  }
  return completed;
}

Result<WorkProgress> RedisWorkQueue::progress() {
  const std::vector<Args> commands = {
      {"HMGET", meta_key_, "total", "closed"}, {"HLEN", results_key_}, {"XPENDING", stream_key_, kGroup}};
  PRISM_ASSIGN_OR_RETURN(std::vector<Reply> r, connection_->pipeline(commands));
  for (size_t i = 0; i < r.size(); ++i) PRISM_RETURN_IF_ERROR(connection_->check(commands[i], r[i].get()));
  if (!is_array(r[0].get(), 2) || !is_array(r[2].get(), 4)) return connection_->unexpected("progress");
  const auto total = integer(r[0]->element[0]), closed = integer(r[0]->element[1]);
  const auto done = integer(r[1].get()), pending = integer(r[2]->element[0]);
  if (!total || !closed || !done || !pending) return connection_->unexpected("progress (not integers)");
  WorkProgress p;
  p.total = *total;
  p.done = *done;
  p.pending = *pending;
  p.closed = *closed != 0;
  const redisReply* consumers = r[2]->element[3];  // [[name, count-as-string], ...] or nil
  if (is_array(consumers)) {
    for (size_t i = 0; i < consumers->elements; ++i) {
      const redisReply* c = consumers->element[i];
      if (!is_array(c, 2)) return connection_->unexpected("XPENDING (consumers)");
      const auto n = integer(c->element[1]);
      if (!n) return connection_->unexpected("XPENDING (count)");
      p.pending_by_consumer[text(c->element[0])] = *n;
    }
  }
  return p;
}

Result<std::vector<std::optional<std::string>>> RedisWorkQueue::results(std::span<const std::string> keys) {
  std::vector<Args> commands;
  for (size_t begin = 0; begin < keys.size(); begin += kKeysPerCommand) {
    Args get = {"HMGET", results_key_};
    for (size_t i = begin; i < std::min(keys.size(), begin + kKeysPerCommand); ++i) get.push_back(keys[i]);
    commands.push_back(std::move(get));
  }
  PRISM_ASSIGN_OR_RETURN(std::vector<Reply> r, connection_->pipeline(commands));
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (size_t c = 0; c < r.size(); ++c) {
    PRISM_RETURN_IF_ERROR(connection_->check(commands[c], r[c].get()));
    if (!is_array(r[c].get(), commands[c].size() - 2)) return connection_->unexpected("HMGET results");
    for (size_t i = 0; i < r[c]->elements; ++i) {
      const redisReply* v = r[c]->element[i];
      out.push_back(v->type == REDIS_REPLY_STRING ? std::optional<std::string>(text(v)) : std::nullopt);
    }
  }
  return out;
}

Result<std::string> RedisWorkQueue::set_attribute_once(const std::string& name, const std::string& value) {
  const std::vector<Args> commands = {{"HSETNX", attributes_key_, name, value}, {"HGET", attributes_key_, name}};
  PRISM_ASSIGN_OR_RETURN(std::vector<Reply> r, connection_->pipeline(commands));
  for (size_t i = 0; i < r.size(); ++i) PRISM_RETURN_IF_ERROR(connection_->check(commands[i], r[i].get()));
  if (r[1]->type != REDIS_REPLY_STRING) return connection_->unexpected("HGET attribute");
  return text(r[1].get());
}

Result<std::optional<std::string>> RedisWorkQueue::attribute(const std::string& name) {
  PRISM_ASSIGN_OR_RETURN(Reply r, connection_->run({"HGET", attributes_key_, name}));
  if (r->type == REDIS_REPLY_NIL) return std::optional<std::string>();
  if (r->type != REDIS_REPLY_STRING) return connection_->unexpected("HGET attribute");
  return std::optional<std::string>(text(r.get()));
}

}  // namespace prism::serving

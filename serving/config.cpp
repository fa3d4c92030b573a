// serving/config.cpp: TOML → Config. toml++ throws, so parsing is wrapped at the call; the
// rest reads the tree with explicit type checks so every error carries its key and line.
#include "serving/config.h"

#include <algorithm>
#include <set>

#include <toml++/toml.h>

#include "base/file.h"

namespace prism::serving {

// ---------------------------------------------------------------------------------------
// Tasks and knobs

const std::vector<std::string>& known_tasks() {
  static const std::vector<std::string> tasks = {"echo", "embed", "chat", "transcribe", "vad", "speak", "image", "video"};
  return tasks;
}

const std::vector<std::string>& known_compute_waits() {
  static const std::vector<std::string> waits = {"passive", "short_spin", "spin"};
  return waits;
}

std::string modality_of_task(std::string_view task) {
  if (task == "embed") return "embeddings";
  if (task == "chat") return "llm";
  if (task == "transcribe") return "asr";
  if (task == "vad") return "vad";
  if (task == "speak") return "tts";
  if (task == "image") return "image_generation";
  if (task == "video") return "video_generation";
  if (task == "echo") return "test";
  return "unknown";
}

void Knobs::set(std::string name, KnobValue value, std::string origin) {
  if (!origin.empty()) origins_[name] = std::move(origin);
  values_[std::move(name)] = std::move(value);
}

bool Knobs::has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::string Knobs::origin(std::string_view name) const {
  auto it = origins_.find(name);
  return it == origins_.end() ? std::string() : it->second;
}

std::string Knobs::where(std::string_view name) const {
  const std::string at = origin(name);
  return (at.empty() ? "" : at + ": ") + "knob '" + std::string(name) + "'";
}

Status Knobs::check_names(std::span<const std::string_view> known, std::string_view user) const {
  for (const auto& [name, value] : values_) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    const std::string at = origin(name);
    return invalid_argument((at.empty() ? "" : at + ": ") + "unknown knob '" + name + "' for " + std::string(user) +
                            " (known: " + list + ")");
  }
  return {};
}

Status Knobs::type_error(std::string_view name, std::string_view want) const {
  return invalid_argument(where(name) + " must be " + std::string(want));
}

Result<bool> Knobs::get_bool(std::string_view name, bool fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (auto* b = std::get_if<bool>(&it->second)) return *b;
  return type_error(name, "a boolean");
}

Result<int64_t> Knobs::get_int(std::string_view name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
  return type_error(name, "an integer");
}

Result<double> Knobs::get_double(std::string_view name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (auto* d = std::get_if<double>(&it->second)) return *d;
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return type_error(name, "a number");
}

Result<std::string> Knobs::get_string(std::string_view name, std::string fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (auto* s = std::get_if<std::string>(&it->second)) return *s;
  return type_error(name, "a string");
}

// ---------------------------------------------------------------------------------------
// validate(): messages are "key: problem", the key relative to the struct's table; the
// Config level prefixes the section and adds file and line.

namespace {

Status bad(std::string_view key, const std::string& problem) {
  return invalid_argument(std::string(key) + ": " + problem);
}

Status check_range(std::string_view key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return bad(key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
  return {};
}

bool has_space_or_control(std::string_view s) {
  for (unsigned char c : s)
    if (c <= ' ' || c == 0x7f) return true;
  return false;
}

}  // namespace

Status ServerLimits::validate() const {
  constexpr int64_t kMax = int64_t{1} << 40;
  PRISM_RETURN_IF_ERROR(check_range("max_body_bytes", max_body_bytes, 1, kMax));
  PRISM_RETURN_IF_ERROR(check_range("max_header_bytes", max_header_bytes, 1024, 1 << 24));
  PRISM_RETURN_IF_ERROR(check_range("read_timeout_ms", read_timeout_ms, 1, kMax));
  PRISM_RETURN_IF_ERROR(check_range("idle_timeout_ms", idle_timeout_ms, 1, kMax));
  PRISM_RETURN_IF_ERROR(check_range("request_timeout_ms", request_timeout_ms, 1, kMax));
  PRISM_RETURN_IF_ERROR(check_range("shutdown_grace_ms", shutdown_grace_ms, 0, kMax));
  PRISM_RETURN_IF_ERROR(check_range("max_connections", max_connections, 1, 1 << 20));
  PRISM_RETURN_IF_ERROR(check_range("num_io_threads", num_io_threads, 1, 64));
  PRISM_RETURN_IF_ERROR(check_range("num_media_threads", num_media_threads, 1, 256));
  PRISM_RETURN_IF_ERROR(check_range("max_media_queue", max_media_queue, 1, 1 << 20));
  PRISM_RETURN_IF_ERROR(check_range("num_job_threads", num_job_threads, 1, 256));
  PRISM_RETURN_IF_ERROR(check_range("max_job_queue", max_job_queue, 1, 1 << 20));
  return {};
}

Status MediaCacheConfig::validate() const {
  constexpr int64_t kMax = int64_t{1} << 50;
  PRISM_RETURN_IF_ERROR(check_range("max_bytes", max_bytes, 0, kMax));
  PRISM_RETURN_IF_ERROR(check_range("max_disk_bytes", max_disk_bytes, 0, kMax));
  return {};
}

Status ServerConfig::validate() const {
  if (host.empty() || has_space_or_control(host)) return bad("host", "must be a host name or address");
  // 0 lets the OS pick a free port (tests).
  PRISM_RETURN_IF_ERROR(check_range("port", port, 0, 65535));
  for (const std::string& k : api_keys)
    if (k.empty() || has_space_or_control(k)) return bad("api_keys", "keys must be non-empty, without spaces");
  if (!compute_wait.empty()) {
    const std::vector<std::string>& waits = known_compute_waits();
    if (std::find(waits.begin(), waits.end(), compute_wait) == waits.end()) {
      std::string list;
      for (const std::string& w : waits) list += (list.empty() ? "\"" : ", \"") + w + "\"";
      return bad("compute_wait", "must be one of " + list + ", got '" + compute_wait + "'");
    }
  }
  Status s = limits.validate();
  if (!s.ok()) return invalid_argument("limits." + s.message());  // "limits.key: problem"
  s = media_cache.validate();
  if (!s.ok()) return invalid_argument("media_cache." + s.message());
  return {};
}

Status DeploymentConfig::validate() const {
  if (name.empty()) return bad("name", "is required");
  if (name.size() > 128 || has_space_or_control(name))
    return bad("name", "must be at most 128 characters, without spaces, got '" + name + "'");
  if (task.empty()) return bad("task", "is required");
  bool known = false;
  std::string tasks;
  for (const std::string& t : known_tasks()) {
    known = known || t == task;
    tasks += (tasks.empty() ? "" : ", ") + t;
  }
  if (!known) return bad("task", "unknown task '" + task + "' (tasks: " + tasks + ")");
  if (model.empty() && task != "echo") return bad("model", "is required (a Hugging Face model directory)");
  PRISM_RETURN_IF_ERROR(check_range("replicas", replicas, 1, 64));
  if (precision != "f32" && precision != "bf16" && precision != "int8")
    return bad("precision", "must be one of f32, bf16, int8, got '" + precision + "'");
  PRISM_RETURN_IF_ERROR(check_range("timeout_ms", timeout_ms, 0, int64_t{1} << 40));
  const BatchPolicy& b = batching;
  PRISM_RETURN_IF_ERROR(check_range("batching.max_batch_size", b.max_batch_size, 1, 65536));
  PRISM_RETURN_IF_ERROR(check_range("batching.max_batch_tokens", b.max_batch_tokens, 1, int64_t{1} << 32));
  PRISM_RETURN_IF_ERROR(check_range("batching.max_queue_delay_us", b.max_queue_delay_us, 0, 60'000'000));
  PRISM_RETURN_IF_ERROR(check_range("batching.queue_capacity", b.queue_capacity, 1, 10'000'000));
  for (size_t i = 0; i < b.preferred_batch_sizes.size(); ++i) {
    int p = b.preferred_batch_sizes[i];
    PRISM_RETURN_IF_ERROR(check_range("batching.preferred_batch_sizes", p, 1, b.max_batch_size));
    if (i > 0 && p <= b.preferred_batch_sizes[i - 1])
      return bad("batching.preferred_batch_sizes", "must be strictly increasing");
  }
  return {};
}

std::string Config::origin_of(const std::string& key) const {
  // The most specific origin known: the key itself, else the nearest enclosing table
  // (a missing key is reported at its table's header).
  std::string k = key;
  while (true) {
    if (auto f = key_flags.find(k); f != key_flags.end()) return f->second;
    if (auto l = key_lines.find(k); l != key_lines.end()) return source_file + ":" + std::to_string(l->second);
    size_t dot = k.rfind('.');
    if (dot == std::string::npos) break;
    k.resize(dot);
  }
  return source_file.empty() ? std::string("config") : source_file;
}

std::string Config::locate(const std::string& key, std::string_view problem) const {
  return origin_of(key) + ": key '" + key + "': " + std::string(problem);
}

namespace {

// Splits a validate() message "key: problem" and locates it under `prefix`.
Status located(const Config& c, const std::string& prefix, const Status& s) {
  const std::string& m = s.message();
  size_t colon = m.find(": ");
  if (colon == std::string::npos) return invalid_argument(c.locate(prefix, m));
  return invalid_argument(c.locate(prefix + m.substr(0, colon), m.substr(colon + 2)));
}

std::string deployment_key(size_t i) { return "deployment[" + std::to_string(i) + "]"; }

}  // namespace

Status Config::validate() const {
  if (Status s = server.validate(); !s.ok()) return located(*this, "server.", s);
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < deployments.size(); ++i) {
    const DeploymentConfig& d = deployments[i];
    if (Status s = d.validate(); !s.ok()) return located(*this, deployment_key(i) + ".", s);
    auto [it, fresh] = seen.emplace(d.name, i);
    if (!fresh)
      return invalid_argument(locate(deployment_key(i) + ".name", "duplicate deployment name '" + d.name +
                                                                      "' (first defined at " +
                                                                      origin_of(deployment_key(it->second) + ".name") + ")"));
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// TOML reading

namespace {

std::string_view type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

// Reads one table's keys into a struct. Every key read is recorded with its line; a key the
// table does not know is an error.
class TableReader {
 public:
  TableReader(Config& config, const toml::table& table, std::string prefix)
      : c_(config), t_(table), prefix_(std::move(prefix)) {}

  // Call after reading: anything not consumed is a typo or an unsupported option.
  Status check_unknown() const {
    for (const auto& [k, node] : t_) {
      if (used_.count(std::string(k.str()))) continue;
      std::string known;
      for (const std::string& u : expected_) known += (known.empty() ? "" : ", ") + u;
      return error(node, key(k.str()), "unknown key (expected one of: " + known + ")");
    }
    return {};
  }

  Status error(const toml::node& node, const std::string& full_key, const std::string& problem) const {
    return invalid_argument(c_.source_file + ":" + std::to_string(node.source().begin.line) + ": key '" + full_key +
                            "': " + problem);
  }

  std::string key(std::string_view k) const { return prefix_ + std::string(k); }

  // Returns the node for `k` (nullptr if absent) and records it as known and located.
  const toml::node* get(std::string_view k) {
    expected_.emplace_back(k);
    used_.insert(std::string(k));
    const toml::node* n = t_.get(k);
    if (n != nullptr) c_.key_lines[key(k)] = static_cast<int>(n->source().begin.line);
    return n;
  }

  Status type_mismatch(const toml::node& n, std::string_view k, std::string_view want) const {
    return error(n, key(k), "expected " + std::string(want) + ", got " + std::string(type_name(n.type())));
  }

  Status read(std::string_view k, std::string& out) {
    const toml::node* n = get(k);
    if (n == nullptr) return {};
    if (!n->is_string()) return type_mismatch(*n, k, "a string");
    out = n->as_string()->get();
    return {};
  }
  Status read(std::string_view k, bool& out) {
    const toml::node* n = get(k);
    if (n == nullptr) return {};
    if (!n->is_boolean()) return type_mismatch(*n, k, "a boolean");
    out = n->as_boolean()->get();
    return {};
  }
  Status read(std::string_view k, int64_t& out) {
    const toml::node* n = get(k);
    if (n == nullptr) return {};
    if (!n->is_integer()) return type_mismatch(*n, k, "an integer");
    out = n->as_integer()->get();
    return {};
  }
  Status read(std::string_view k, int& out) {
    int64_t v = out;
    PRISM_RETURN_IF_ERROR(read(k, v));
    if (v < INT32_MIN || v > INT32_MAX) return error(*t_.get(k), key(k), "out of range: " + std::to_string(v));
    out = static_cast<int>(v);
    return {};
  }
  Status read(std::string_view k, std::vector<std::string>& out) {
    const toml::node* n = get(k);
    if (n == nullptr) return {};
    if (!n->is_array()) return type_mismatch(*n, k, "an array of strings");
    out.clear();
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) return type_mismatch(e, k, "an array of strings");
      out.push_back(e.as_string()->get());
    }
    return {};
  }
  Status read(std::string_view k, std::vector<int>& out) {
    const toml::node* n = get(k);
    if (n == nullptr) return {};
    if (!n->is_array()) return type_mismatch(*n, k, "an array of integers");
    out.clear();
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_integer()) return type_mismatch(e, k, "an array of integers");
      int64_t v = e.as_integer()->get();
      if (v < INT32_MIN || v > INT32_MAX) return error(e, key(k), "out of range: " + std::to_string(v));
      out.push_back(static_cast<int>(v));
    }
    return {};
  }
  // A sub-table (nullptr when absent).
  Result<const toml::table*> table(std::string_view k) {
    const toml::node* n = get(k);
    if (n == nullptr) return static_cast<const toml::table*>(nullptr);
    if (!n->is_table()) return type_mismatch(*n, k, "a table");
    return n->as_table();
  }

 private:
  Config& c_;
  const toml::table& t_;
  std::string prefix_;
  std::vector<std::string> expected_;
  std::set<std::string> used_;
};

Status read_limits(Config& c, const toml::table& t) {
  TableReader r(c, t, "server.limits.");
  ServerLimits& l = c.server.limits;
  PRISM_RETURN_IF_ERROR(r.read("max_body_bytes", l.max_body_bytes));
  PRISM_RETURN_IF_ERROR(r.read("max_header_bytes", l.max_header_bytes));
  PRISM_RETURN_IF_ERROR(r.read("read_timeout_ms", l.read_timeout_ms));
  PRISM_RETURN_IF_ERROR(r.read("idle_timeout_ms", l.idle_timeout_ms));
  PRISM_RETURN_IF_ERROR(r.read("request_timeout_ms", l.request_timeout_ms));
  PRISM_RETURN_IF_ERROR(r.read("shutdown_grace_ms", l.shutdown_grace_ms));
  PRISM_RETURN_IF_ERROR(r.read("max_connections", l.max_connections));
  PRISM_RETURN_IF_ERROR(r.read("num_io_threads", l.num_io_threads));
  PRISM_RETURN_IF_ERROR(r.read("num_media_threads", l.num_media_threads));
  PRISM_RETURN_IF_ERROR(r.read("max_media_queue", l.max_media_queue));
  PRISM_RETURN_IF_ERROR(r.read("num_job_threads", l.num_job_threads));
  PRISM_RETURN_IF_ERROR(r.read("max_job_queue", l.max_job_queue));
  return r.check_unknown();
}

Status read_media_cache(Config& c, const toml::table& t) {
  TableReader r(c, t, "server.media_cache.");
  MediaCacheConfig& m = c.server.media_cache;
  PRISM_RETURN_IF_ERROR(r.read("max_bytes", m.max_bytes));
  PRISM_RETURN_IF_ERROR(r.read("dir", m.dir));
  PRISM_RETURN_IF_ERROR(r.read("max_disk_bytes", m.max_disk_bytes));
  return r.check_unknown();
}

Status read_server(Config& c, const toml::table& t) {
  TableReader r(c, t, "server.");
  PRISM_RETURN_IF_ERROR(r.read("host", c.server.host));
  PRISM_RETURN_IF_ERROR(r.read("port", c.server.port));
  PRISM_RETURN_IF_ERROR(r.read("api_keys", c.server.api_keys));
  PRISM_RETURN_IF_ERROR(r.read("strict", c.server.strict));
  PRISM_RETURN_IF_ERROR(r.read("compute_wait", c.server.compute_wait));
  PRISM_RETURN_IF_ERROR(r.read("compute_gate", c.server.compute_gate));
  PRISM_ASSIGN_OR_RETURN(const toml::table* limits, r.table("limits"));
  if (limits != nullptr) PRISM_RETURN_IF_ERROR(read_limits(c, *limits));
  PRISM_ASSIGN_OR_RETURN(const toml::table* media_cache, r.table("media_cache"));
  if (media_cache != nullptr) PRISM_RETURN_IF_ERROR(read_media_cache(c, *media_cache));
  return r.check_unknown();
}

Status read_batching(Config& c, const toml::table& t, const std::string& prefix, BatchPolicy& b) {
  TableReader r(c, t, prefix);
  PRISM_RETURN_IF_ERROR(r.read("max_batch_size", b.max_batch_size));
  PRISM_RETURN_IF_ERROR(r.read("max_batch_tokens", b.max_batch_tokens));
  PRISM_RETURN_IF_ERROR(r.read("padded_cost", b.padded_cost));
  PRISM_RETURN_IF_ERROR(r.read("max_queue_delay_us", b.max_queue_delay_us));
  // max_wait_ms: the same bound in milliseconds, as TEI and most users name it.
  int64_t max_wait_ms = -1;
  PRISM_RETURN_IF_ERROR(r.read("max_wait_ms", max_wait_ms));
  if (max_wait_ms != -1) {
    if (t.contains("max_queue_delay_us"))
      return invalid_argument(c.locate(prefix + "max_wait_ms", "set max_wait_ms or max_queue_delay_us, not both"));
    if (max_wait_ms < 0 || max_wait_ms > 60'000)
      return invalid_argument(c.locate(prefix + "max_wait_ms", "must be in [0, 60000]"));
    b.max_queue_delay_us = max_wait_ms * 1000;
  }
  PRISM_RETURN_IF_ERROR(r.read("queue_capacity", b.queue_capacity));
  PRISM_RETURN_IF_ERROR(r.read("preferred_batch_sizes", b.preferred_batch_sizes));
  return r.check_unknown();
}

Status read_knobs(Config& c, const toml::table& t, const std::string& prefix, Knobs& knobs) {
  TableReader r(c, t, prefix);
  for (const auto& [k, node] : t) {
    std::string name(k.str());
    std::string origin = c.source_file + ":" + std::to_string(node.source().begin.line);
    c.key_lines[prefix + name] = static_cast<int>(node.source().begin.line);
    if (node.is_boolean()) knobs.set(name, node.as_boolean()->get(), origin);
    else if (node.is_integer()) knobs.set(name, node.as_integer()->get(), origin);
    else if (node.is_floating_point()) knobs.set(name, node.as_floating_point()->get(), origin);
    else if (node.is_string()) knobs.set(name, node.as_string()->get(), origin);
    else
      return r.error(node, prefix + name,
                     "knob values must be a boolean, number or string, got " + std::string(type_name(node.type())));
  }
  return {};
}

Status read_deployment(Config& c, const toml::table& t, size_t index) {
  const std::string prefix = deployment_key(index) + ".";
  c.key_lines[deployment_key(index)] = static_cast<int>(t.source().begin.line);
  DeploymentConfig& d = c.deployments.emplace_back();
  TableReader r(c, t, prefix);
  PRISM_RETURN_IF_ERROR(r.read("name", d.name));
  PRISM_RETURN_IF_ERROR(r.read("task", d.task));
  PRISM_RETURN_IF_ERROR(r.read("model", d.model));
  PRISM_RETURN_IF_ERROR(r.read("replicas", d.replicas));
  PRISM_RETURN_IF_ERROR(r.read("precision", d.precision));
  PRISM_RETURN_IF_ERROR(r.read("priority_lanes", d.priority_lanes));
  PRISM_RETURN_IF_ERROR(r.read("timeout_ms", d.timeout_ms));
  PRISM_ASSIGN_OR_RETURN(const toml::table* batching, r.table("batching"));
  if (batching != nullptr) PRISM_RETURN_IF_ERROR(read_batching(c, *batching, prefix + "batching.", d.batching));
  PRISM_ASSIGN_OR_RETURN(const toml::table* knobs, r.table("knobs"));
  if (knobs != nullptr) PRISM_RETURN_IF_ERROR(read_knobs(c, *knobs, prefix + "knobs.", d.knobs));
  return r.check_unknown();
}

Status read_root(Config& c, const toml::table& root) {
  TableReader r(c, root, "");
  PRISM_ASSIGN_OR_RETURN(const toml::table* server, r.table("server"));
  if (server != nullptr) PRISM_RETURN_IF_ERROR(read_server(c, *server));
  if (const toml::node* deps = r.get("deployment")) {
    if (!deps->is_array_of_tables())
      return r.type_mismatch(*deps, "deployment", "an array of tables (write [[deployment]])");
    size_t i = 0;
    for (const toml::node& d : *deps->as_array()) PRISM_RETURN_IF_ERROR(read_deployment(c, *d.as_table(), i++));
  }
  return r.check_unknown();
}

}  // namespace

Result<Config> parse_config(std::string_view toml_text, std::string_view file) {
  Config c;
  c.source_file = std::string(file);
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string(file));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return invalid_argument(std::string(file) + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                            ": TOML syntax error: " + std::string(e.description()));
  } catch (const std::exception& e) {
    return invalid_argument(std::string(file) + ": cannot parse TOML: " + e.what());
  }
  PRISM_RETURN_IF_ERROR(read_root(c, root));
  PRISM_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<Config> load_config(const std::string& path) {
  Result<std::string> text = read_file(path);
  if (!text) return Status(text.status().code(), "cannot read config file " + path + ": " + text.status().message());
  return parse_config(*text, path);
}

// ---------------------------------------------------------------------------------------
// Overrides and logging

namespace {

// "/models/all-MiniLM-L6-v2/" → "all-MiniLM-L6-v2".
std::string model_name_from_path(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

Status apply_overrides(Config& config, const ConfigOverrides& o) {
  if (o.host) {
    config.server.host = *o.host;
    config.key_flags["server.host"] = "--host";
  }
  if (o.port) {
    // Range is checked here: the field is an int and the flag may hold anything.
    if (*o.port < 0 || *o.port > 65535)
      return invalid_argument("--port: key 'server.port': must be in 0..65535, got " + std::to_string(*o.port));
    config.server.port = static_cast<int>(*o.port);
    config.key_flags["server.port"] = "--port";
  }
  if (o.media_cache_bytes) {
    config.server.media_cache.max_bytes = *o.media_cache_bytes;
    config.key_flags["server.media_cache.max_bytes"] = "--media-cache-bytes";
  }
  if (o.media_cache_dir) {
    config.server.media_cache.dir = *o.media_cache_dir;
    config.key_flags["server.media_cache.dir"] = "--media-cache-dir";
  }
  if (!o.api_keys.empty()) {
    config.server.api_keys = o.api_keys;
    config.key_flags["server.api_keys"] = "--api-key";
  }
  if (o.strict) {
    config.server.strict = true;
    config.key_flags["server.strict"] = "--strict";
  }
  for (const ConfigOverrides::Model& m : o.models) {
    DeploymentConfig d;
    d.name = model_name_from_path(m.path);
    d.task = m.task;
    d.model = m.path;
    config.key_flags[deployment_key(config.deployments.size())] = m.flag + " " + m.path;
    config.deployments.push_back(std::move(d));
  }
  return config.validate();
}

nlohmann::json config_to_json(const Config& c) {
  nlohmann::json j;
  const ServerLimits& l = c.server.limits;
  j["server"] = {{"host", c.server.host},
                 {"port", c.server.port},
                 {"api_keys", c.server.api_keys.empty() ? "none" : std::to_string(c.server.api_keys.size()) + " (redacted)"},
                 {"strict", c.server.strict},
                 {"compute_wait", c.server.compute_wait.empty() ? "unset" : c.server.compute_wait},
                 {"compute_gate", c.server.compute_gate},
                 {"limits",
                  {{"max_body_bytes", l.max_body_bytes},
                   {"max_header_bytes", l.max_header_bytes},
                   {"read_timeout_ms", l.read_timeout_ms},
                   {"idle_timeout_ms", l.idle_timeout_ms},
                   {"request_timeout_ms", l.request_timeout_ms},
                   {"shutdown_grace_ms", l.shutdown_grace_ms},
                   {"max_connections", l.max_connections},
                   {"num_io_threads", l.num_io_threads},
                   {"num_media_threads", l.num_media_threads},
                   {"max_media_queue", l.max_media_queue},
                   {"num_job_threads", l.num_job_threads},
                   {"max_job_queue", l.max_job_queue}}},
                 {"media_cache",
                  {{"max_bytes", c.server.media_cache.max_bytes},
                   {"dir", c.server.media_cache.dir},
                   {"max_disk_bytes", c.server.media_cache.max_disk_bytes}}}};
  j["deployment"] = nlohmann::json::array();
  for (const DeploymentConfig& d : c.deployments) {
    const BatchPolicy& b = d.batching;
    nlohmann::json knobs = nlohmann::json::object();
    for (const auto& [k, v] : d.knobs.values()) std::visit([&](const auto& x) { knobs[k] = x; }, v);
    j["deployment"].push_back({{"name", d.name},
                               {"task", d.task},
                               {"model", d.model},
                               {"replicas", d.replicas},
                               {"precision", d.precision},
                               {"priority_lanes", d.priority_lanes},
                               {"timeout_ms", d.timeout_ms},
                               {"batching",
                                {{"max_batch_size", b.max_batch_size},
                                 {"max_batch_tokens", b.max_batch_tokens},
                                 {"padded_cost", b.padded_cost},
                                 {"max_queue_delay_us", b.max_queue_delay_us},
                                 {"queue_capacity", b.queue_capacity},
                                 {"preferred_batch_sizes", b.preferred_batch_sizes}}},
                               {"knobs", knobs}});
  }
  return j;
}

}  // namespace prism::serving

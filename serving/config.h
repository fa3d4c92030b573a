// serving/config.h: the resolved configuration: one TOML file ([server] and one
// [[deployment]] per model) plus CLI overrides. Structs with validate(); frozen after start-up.
// NOTE: every error names where the bad value came from: "FILE:LINE: key 'a.b': problem"
// for the file, "--flag: problem" for an override. Unknown keys are errors (a typo must not
// be silently ignored). This file parses and checks; it never starts anything.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "serving/batcher.h"

namespace prism::serving {

struct ServerLimits {
  int64_t max_body_bytes = 32ll << 20;    // larger bodies get 413 (audio uploads fit)
  int64_t max_header_bytes = 16 << 10;    // request line + headers
  int64_t read_timeout_ms = 30'000;       // whole request (headers + body) must arrive in this
  int64_t idle_timeout_ms = 60'000;       // keep-alive connection with no request
  int64_t request_timeout_ms = 600'000;   // a request's whole life, streaming included
  int64_t shutdown_grace_ms = 10'000;     // SIGTERM: drain in-flight work up to this long
  int64_t max_connections = 4096;         // beyond it new connections are refused
  int num_io_threads = 2;                 // Asio threads (JSON, tokenization run there too)
  int num_media_threads = 4;              // workers fetching and decoding request media (work_pool.h)
  int64_t max_media_queue = 256;          // requests waiting for a media worker; beyond it 429
  int num_job_threads = 4;                // job pool workers (pipelines/job_pool.h): jobs preparing at once
  int64_t max_job_queue = 4;              // jobs waiting for a worker (each holds its upload); beyond it 429

  Status validate() const;  // message "key: problem", key relative to [server.limits]
};

// [server.media_cache]: the process-wide cache of encoder outputs (images, video frames),
// shared by every deployment (engines/encode/media_cache.h).
struct MediaCacheConfig {
  int64_t max_bytes = 512ll << 20;     // in memory; 0 disables it
  std::string dir;                     // empty: memory only; else persisted there across restarts
  int64_t max_disk_bytes = 4ll << 30;

  Status validate() const;  // message "key: problem", key relative to [server.media_cache]
};

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;  // empty: no auth
  // false: a deployment that fails to load is left out (failed, with its reason, in /ready
  // and /v1/models) and the others serve. true: any failed deployment stops start-up (exit 1).
  bool strict = false;
  // How the compute pool's idle OpenMP workers wait for the next parallel region: "passive"
  // (sleep at once), "short_spin" (spin briefly, then sleep), "spin" (libgomp's default: spin
  // a few milliseconds, then sleep); empty:
  // not set here (PRISM_COMPUTE_WAIT, else Prism's default; app/compute_wait.h). Applied by
  // app/ before the pool starts (libgomp reads it once, at process start).
  std::string compute_wait;
  // true: deployments take turns on the whole compute pool (runtime/compute_gate.h); false:
  // each computes whenever it has work, with its own OpenMP team (two busy deployments then
  // oversubscribe the cores; for comparisons).
  bool compute_gate = true;
  ServerLimits limits;
  MediaCacheConfig media_cache;

  Status validate() const;  // message "key: problem", key relative to [server]
};

// A knob value as written in the config; the engine that reads it decides what it means.
using KnobValue = std::variant<bool, int64_t, double, std::string>;

// [deployment.knobs]: name → value, each remembering where it was set so an engine's
// complaint can name the line. Typed getters: fallback when absent, invalid_argument when set
// with the wrong type (an integer is accepted where a double is wanted).
class Knobs {
 public:
  void set(std::string name, KnobValue value, std::string origin = {});
  bool has(std::string_view name) const;
  const std::map<std::string, KnobValue, std::less<>>& values() const { return values_; }
  std::string origin(std::string_view name) const;  // "FILE:LINE" or "" when unknown
  // How messages name a knob: "FILE:LINE: knob 'name'", or "knob 'name'" when unknown.
  std::string where(std::string_view name) const;
  // invalid_argument naming the first knob not in `known` ("FILE:LINE: unknown knob 'x' for
  // <user>, e.g. "a chat deployment" (known: ...)"): a misspelt knob must not be ignored.
  Status check_names(std::span<const std::string_view> known, std::string_view user) const;

  Result<bool> get_bool(std::string_view name, bool fallback) const;
  Result<int64_t> get_int(std::string_view name, int64_t fallback) const;
  Result<double> get_double(std::string_view name, double fallback) const;
  Result<std::string> get_string(std::string_view name, std::string fallback) const;

 private:
  Status type_error(std::string_view name, std::string_view want) const;
  std::map<std::string, KnobValue, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> origins_;
};

struct DeploymentConfig {
  std::string name;                // the `model` field clients send
  std::string task;                // embed, chat, transcribe, vad, speak, image, video, echo
  std::string model;               // Hugging Face directory (unused by echo)
  int replicas = 1;
  std::string precision = "f32";   // f32, bf16, int8
  bool priority_lanes = true;      // false: bulk requests queue with online ones, FIFO
  int64_t timeout_ms = 60'000;     // deadline from submit; 0 = none
  BatchPolicy batching;
  Knobs knobs;

  Status validate() const;  // message "key: problem", key relative to the [[deployment]] table
};

// The values [server] compute_wait takes: "passive", "short_spin", "spin".
const std::vector<std::string>& known_compute_waits();

// The tasks a deployment may declare, and the modality each is measured as.
const std::vector<std::string>& known_tasks();
std::string modality_of_task(std::string_view task);

struct Config {
  ServerConfig server;
  std::vector<DeploymentConfig> deployments;

  // Where values came from, for error messages: the file, and "dotted.key" → line (file
  // values) or → "--flag" (overrides). Filled by the parser and apply_overrides.
  std::string source_file;
  std::map<std::string, int, std::less<>> key_lines;
  std::map<std::string, std::string, std::less<>> key_flags;

  // All sections plus cross checks (duplicate deployment names), with located messages.
  Status validate() const;
  // "FILE:LINE: key 'k': problem", "--flag: problem", or "FILE: key 'k': problem".
  std::string locate(const std::string& key, std::string_view problem) const;
  // "FILE:LINE", "--flag ...", or FILE when the key has no recorded origin.
  std::string origin_of(const std::string& key) const;
};

// Parses TOML text; `file` names it in errors. Runs validate().
Result<Config> parse_config(std::string_view toml_text, std::string_view file = "<config>");
// Reads and parses a file (not_found when it cannot be read).
Result<Config> load_config(const std::string& path);

// CLI flags that override the file (applied by app/ after load_config or on a default Config).
struct ConfigOverrides {
  std::optional<std::string> host;                     // --host
  std::optional<int64_t> port;                         // --port
  std::vector<std::string> api_keys;                   // --api-key (repeatable): replaces the file's keys
  bool strict = false;                                 // --strict: sets [server] strict (never clears it)
  std::optional<int64_t> media_cache_bytes;            // --media-cache-bytes
  std::optional<std::string> media_cache_dir;          // --media-cache-dir
  struct Model {
    std::string task;  // "embed" for --embed PATH, ...
    std::string path;  // the deployment is named after the directory's last component
    std::string flag;  // "--embed", for error messages
  };
  std::vector<Model> models;                           // single-model flags: add deployments
};

// Applies the overrides, then validates again (errors name the flag).
Status apply_overrides(Config& config, const ConfigOverrides& overrides);

// The resolved config for the start-up log; api keys are redacted.
nlohmann::json config_to_json(const Config& config);

}  // namespace prism::serving

// app/serve.h: `prism serve`: resolve the config (file or demo set, then CLI overrides), start
// the deployments, then the HTTP server; on SIGTERM/SIGINT drain and exit 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "serving/config.h"

namespace prism::app {

struct ServeOptions {
  std::string config_path;                              // --config; empty: see run_serve
  std::optional<std::string> host;                      // --host
  std::optional<int64_t> port;                          // --port
  std::vector<std::string> api_keys;                    // --api-key (repeatable)
  std::vector<serving::ConfigOverrides::Model> models;  // --embed PATH, --chat PATH, ...
  std::string demo_dir;                                 // --demo-dir; empty: default_demo_dir()
  std::optional<int64_t> media_cache_bytes;             // --media-cache-bytes
  std::optional<std::string> media_cache_dir;           // --media-cache-dir
  bool strict = false;                                  // --strict: [server] strict = true
};

// The tasks that have a single-model flag (--TASK PATH): every task but the echo test engine.
std::vector<std::string> single_model_tasks();

// Without --config and without single-model flags, serves the demo set (created if missing).
// Exit codes: 0 after a graceful shutdown; 1 for a bad config, a port in use, every deployment
// failing to load, or (strict) any one failing.
int run_serve(const ServeOptions& options);

}  // namespace prism::app

// app/serve.cpp: the server's lifecycle. Order matters: deployments start loading first, the
// HTTP server opens next (so /health answers and /ready says 503 while models load), and on
// shutdown the HTTP side drains first (in-flight requests still reach running deployments),
// then the deployments drain what is left. Every start-up error is one line naming its
// origin (FILE:LINE: key, or --flag) and exits 1.
#include "app/serve.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "api/http_server.h"
#include "api/router.h"
#include "api/routes/audio_transcriptions.h"
#include "api/routes/chat_completions.h"
#include "api/routes/completions.h"
#include "api/routes/echo.h"
#include "api/routes/embeddings.h"
#include "api/routes/search.h"
#include "api/routes/operational.h"
#include "api/routes/realtime.h"
#include "app/demo.h"
#include "base/log.h"
#include "engines/encode/embed_engine.h"
#include "engines/encode/media_cache.h"
#include "engines/generate/generate_engine.h"
#include "engines/transcribe/asr_service.h"
#include "runtime/cpu_features.h"
#include "runtime/threads.h"
#include "serving/deployment_set.h"
#include "serving/echo_engine.h"
#include "serving/metrics.h"

namespace prism::app {

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "prism serve: %s\n", message.c_str());
  return 1;
}

// The engines this build links. Each engine issue registers its task here.
serving::EngineFactories make_engines() {
  serving::EngineFactories engines;
  serving::register_echo_engine(engines);
  prism::engines::encode::register_embed_engine(engines);
  prism::engines::generate::register_generate_engine(engines);
  return engines;
}

// Resolves the config: the file, the demo set, or nothing (single-model flags), then the
// CLI overrides. `demo`: set when the demo set is served.
Result<serving::Config> resolve_config(const ServeOptions& o, bool& demo) {
  serving::Config config;
  demo = false;
  if (!o.config_path.empty()) {
    PRISM_ASSIGN_OR_RETURN(config, serving::load_config(o.config_path));
  } else if (o.models.empty()) {
    const std::string dir = o.demo_dir.empty() ? default_demo_dir() : o.demo_dir;
    bool created = false;
    PRISM_ASSIGN_OR_RETURN(std::string path, ensure_demo(dir, &created));
    if (created) PRISM_LOG_INFO("wrote the demo set in {}", dir);
    PRISM_ASSIGN_OR_RETURN(config, serving::load_config(path));
    demo = true;
  }
  serving::ConfigOverrides overrides;
  overrides.host = o.host;
  overrides.port = o.port;
  overrides.api_keys = o.api_keys;
  overrides.media_cache_bytes = o.media_cache_bytes;
  overrides.media_cache_dir = o.media_cache_dir;
  overrides.models = o.models;
  PRISM_RETURN_IF_ERROR(serving::apply_overrides(config, overrides));
  if (config.deployments.empty())
    return invalid_argument(config.origin_of("deployment") + ": no [[deployment]]: nothing to serve");
  return config;
}

// What the config layer cannot know: which tasks this build has engines for and whether
// model directories exist.
Status check_startable(const serving::Config& c, const serving::EngineFactories& engines) {
  for (size_t i = 0; i < c.deployments.size(); ++i) {
    const serving::DeploymentConfig& d = c.deployments[i];
    const std::string key = "deployment[" + std::to_string(i) + "]";
    if (!engines.find(d.task).has_value())
      return invalid_argument(c.locate(key + ".task", "task '" + d.task + "' has no engine in this build"));
    if (d.task != "echo" && !std::filesystem::is_directory(d.model))
      return invalid_argument(c.locate(key + ".model", "no such model directory '" + d.model + "'"));
  }
  return {};
}

int clamp_ms(int64_t ms) { return static_cast<int>(std::min<int64_t>(ms, INT_MAX)); }

api::HttpServerOptions http_options(const serving::ServerConfig& s) {
  api::HttpServerOptions o;
  o.host = s.host;
  o.port = s.port;
  o.max_body_bytes = static_cast<std::size_t>(s.limits.max_body_bytes);
  o.max_header_bytes = static_cast<std::size_t>(s.limits.max_header_bytes);
  o.read_timeout_ms = clamp_ms(s.limits.read_timeout_ms);
  o.idle_timeout_ms = clamp_ms(s.limits.idle_timeout_ms);
  o.request_timeout_ms = clamp_ms(s.limits.request_timeout_ms);
  o.shutdown_grace_ms = clamp_ms(s.limits.shutdown_grace_ms);
  o.max_connections = static_cast<int>(s.limits.max_connections);
  o.num_io_threads = s.limits.num_io_threads;
  o.api_keys = s.api_keys;
  o.handle_signals = true;
  return o;
}

void log_demo_notice(const std::string& dir) {
  PRISM_LOG_WARN("demo mode: serving the demo set from {}. Demo weights are random: every output is meaningless.",
                 dir);
  PRISM_LOG_WARN(
      "to serve real models, point Prism at Hugging Face checkpoint directories: `prism serve --config "
      "prism.toml` with [[deployment]] name = \"...\", task = \"embed\", model = \"/path/to/hf/dir\" (see "
      "docs/configuration.md), or a single-model flag such as `prism serve --embed /path/to/hf/dir`.");
}

}  // namespace

std::vector<std::string> single_model_tasks() {
  std::vector<std::string> tasks;
  for (const std::string& t : serving::known_tasks())
    if (t != "echo") tasks.push_back(t);
  return tasks;
}

int run_serve(const ServeOptions& options) {
  const CpuFeatures& cpu = cpu_features();
  PRISM_LOG_INFO("prism {} starting | cpu: {} | features: {} | threads: {} (cores: {})", PRISM_VERSION, cpu.brand,
                 cpu.summary(), num_threads(), num_cores());

  bool demo = false;
  Result<serving::Config> resolved = resolve_config(options, demo);
  if (!resolved.has_value()) return fail(resolved.status().message());
  const serving::Config config = std::move(resolved).value();
  const serving::EngineFactories engines = make_engines();
  if (Status s = check_startable(config, engines); !s.ok()) return fail(s.message());
  PRISM_LOG_INFO("config: {}", serving::config_to_json(config).dump());
  if (demo) log_demo_notice(options.demo_dir.empty() ? default_demo_dir() : options.demo_dir);

  // Before any deployment: its engines look media up in the process-wide cache.
  prism::engines::encode::MediaCache::configure({.max_bytes = config.server.media_cache.max_bytes,
                                                 .disk_dir = config.server.media_cache.dir,
                                                 .max_disk_bytes = config.server.media_cache.max_disk_bytes});

  serving::MetricsRegistry metrics;
  serving::register_process_metrics(metrics);
  serving::DeploymentSet deployments(metrics);
  if (Status s = deployments.add_all(config, engines); !s.ok()) return fail(s.message());
  // The speech side of transcribe deployments (live schedulers): stopped before the
  // deployments are (reset below), so no live stream submits to a stopping deployment.
  std::optional<prism::engines::transcribe::AsrServices> asr_services(std::in_place, deployments);
  prism::engines::transcribe::AsrServices& asr = *asr_services;

  api::Router router;
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  api::add_operational_routes(router, {&deployments, &metrics, now_s});
  api::add_echo_routes(router, deployments);
  api::add_embeddings_routes(router, deployments);
  api::add_chat_completions_routes(router, deployments);
  api::add_completions_routes(router, deployments);
  if (Status s = api::add_search_routes(router, deployments); !s.ok()) return fail(s.message());
  api::add_realtime_routes(router, asr);
  api::add_audio_routes(router, deployments, asr);
  api::HttpServer server(http_options(config.server), std::move(router));

  deployments.start_all();
  if (Status s = server.start(); !s.ok()) {
    deployments.stop_all(std::chrono::milliseconds(0));
    std::string hint = s.code() == StatusCode::unavailable
                           ? " (is another server running there? choose another port with --port or [server] port)"
                           : "";
    return fail(s.message() + hint);
  }
  if (Status s = deployments.wait_ready(); !s.ok()) {
    PRISM_LOG_ERROR("a deployment failed to load: {}", s.message());
    server.request_shutdown();
    (void)server.run();
    deployments.stop_all(std::chrono::milliseconds(0));
    return fail(s.message());
  }
  PRISM_LOG_INFO("serving {} deployment(s) on http://{}:{}", deployments.deployments().size(), config.server.host,
                 server.port());

  // Blocks until SIGTERM/SIGINT, then drains the HTTP side within the grace period: requests
  // in flight still reach the running deployments. Once it returns no client is left, so
  // what still waits in a queue is dropped at once (a batch in an engine still finishes).
  Status run = server.run();
  asr_services.reset();
  deployments.stop_all(std::chrono::milliseconds(0));
  if (!run.ok()) return fail(run.message());
  PRISM_LOG_INFO("stopped");
  return 0;
}

}  // namespace prism::app

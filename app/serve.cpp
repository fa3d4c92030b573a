// app/serve.cpp: the server's lifecycle. Order matters: deployments start loading first, the
// HTTP server opens next (so /health answers and /ready says 503 while models load), and on
// shutdown the HTTP side drains first (in-flight requests still reach running deployments),
// then the deployments drain what is left. Every start-up error is one line naming its
// origin (FILE:LINE: key, or --flag) and exits 1. A deployment that fails to load (its model
// directory missing, its weights unreadable or unsupported) is left out and the others serve,
// unless [server] strict (--strict) says any failure stops the server; when every deployment
// failed there is nothing to serve and start-up fails with each reason.
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
#include "api/routes/images.h"
#include "api/routes/search.h"
#include "api/routes/operational.h"
#include "api/routes/realtime.h"
#include "app/compute_wait.h"
#include "app/demo.h"
#include "app/engines.h"
#include "base/log.h"
#include "engines/encode/media_cache.h"
#include "pipelines/job_pool.h"
#include "pipelines/transcribe/asr_service.h"
#include "pipelines/transcribe/voice_activity.h"
#include "runtime/compute_gate.h"
#include "runtime/cpu_allowance.h"
#include "runtime/cpu_features.h"
#include "runtime/isa.h"
#include "runtime/threads.h"
#include "serving/deployment_set.h"
#include "serving/work_pool.h"
#include "serving/metrics.h"
#include "tools/demo/demo.h"

namespace prism::app {

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "prism serve: %s\n", message.c_str());
  return 1;
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
    PRISM_ASSIGN_OR_RETURN(std::string path, tools::demo::ensure_demo(dir, &created));
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
  overrides.strict = o.strict;
  overrides.models = o.models;
  PRISM_RETURN_IF_ERROR(serving::apply_overrides(config, overrides));
  if (config.deployments.empty())
    return invalid_argument(config.origin_of("deployment") + ": no [[deployment]]: nothing to serve");
  PRISM_RETURN_IF_ERROR(pipelines::transcribe::add_vad_deployments(config));
  return config;
}

// What the config layer cannot know: which tasks this build has engines for. A task without
// an engine is the build's or the config's mistake, the same on every start: it stops start-up
// whatever [server] strict says.
Status check_tasks(const serving::Config& c, const serving::EngineFactories& engines) {
  for (size_t i = 0; i < c.deployments.size(); ++i) {
    const serving::DeploymentConfig& d = c.deployments[i];
    if (!engines.find(d.task).has_value())
      return invalid_argument(c.locate("deployment[" + std::to_string(i) + "].task",
                                       "task '" + d.task + "' has no engine in this build"));
  }
  return {};
}

// A missing model directory is a load failure found before loading (a volume not mounted, a
// typo in one path): per deployment, like any other load failure. The error per deployment,
// in config order; ok for those whose directory exists (and for echo, which has none).
std::vector<Status> check_model_dirs(const serving::Config& c) {
  std::vector<Status> out;
  for (size_t i = 0; i < c.deployments.size(); ++i) {
    const serving::DeploymentConfig& d = c.deployments[i];
    const bool is_file = d.task == "vad";  // a vad deployment's model is its .onnx file
    const bool found = d.task == "echo" || (is_file ? std::filesystem::is_regular_file(d.model)
                                                    : std::filesystem::is_directory(d.model));
    if (!found)
      out.push_back(invalid_argument(c.locate("deployment[" + std::to_string(i) + "].model",
                                              std::string(is_file ? "no such model file '" : "no such model directory '") +
                                                  d.model + "'")));
    else
      out.emplace_back();
  }
  return out;
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
  bool demo = false;
  Result<serving::Config> resolved = resolve_config(options, demo);
  if (!resolved.has_value()) return fail(resolved.status().message());
  const serving::Config config = std::move(resolved).value();
  // NOTE: before any thread or OpenMP region: this may execute prism again (same argv and PID)
  // with the compute pool's wait policy in its environment (app/compute_wait.h), and the new
  // process comes back here with it in force.
  const std::string& wait = config.server.compute_wait;
  if (Status s = apply_compute_wait(wait.empty() ? std::nullopt : std::optional<std::string>(wait),
                                    config.origin_of("server.compute_wait") + " [server] compute_wait");
      !s.ok())
    return fail(s.message());
  ComputeGate::process().set_enabled(config.server.compute_gate);

  const CpuFeatures& cpu = cpu_features();
  PRISM_LOG_INFO("prism {} starting | cpu: {} | features: {} | kernels: {}", PRISM_VERSION, cpu.brand, cpu.summary(),
                 isa_name(active_isa()));
  PRISM_LOG_INFO("compute pool: {} threads (default: {}; PRISM_THREADS sets it) | wait: {} | deployments {}",
                 num_threads(), cpu_allowance().describe(), compute_wait_in_force(),
                 config.server.compute_gate ? "take turns on it ([server] compute_gate)"
                                            : "compute at the same time ([server] compute_gate = false)");
  const serving::EngineFactories engines = make_engines();
  if (Status s = check_tasks(config, engines); !s.ok()) return fail(s.message());
  const std::vector<Status> missing_dirs = check_model_dirs(config);
  if (config.server.strict) {
    for (const Status& s : missing_dirs)
      if (!s.ok()) return fail(s.message());
  }
  PRISM_LOG_INFO("config: {}", serving::config_to_json(config).dump());
  if (demo) log_demo_notice(options.demo_dir.empty() ? default_demo_dir() : options.demo_dir);

  // Before any deployment: its engines look media up in the process-wide cache.
  prism::engines::encode::MediaCache::configure({.max_bytes = config.server.media_cache.max_bytes,
                                                 .disk_dir = config.server.media_cache.dir,
                                                 .max_disk_bytes = config.server.media_cache.max_disk_bytes});

  serving::MetricsRegistry metrics;
  serving::register_process_metrics(metrics);
  metrics.gauge("prism_compute_threads",
                "Threads of the compute pool (OpenMP, shared with oneDNN) that the deployments take turns on.")
      .set(double(num_threads()));
  serving::DeploymentSet deployments(metrics);
  if (Status s = deployments.add_all(config, engines); !s.ok()) return fail(s.message());
  for (size_t i = 0; i < missing_dirs.size(); ++i)
    if (!missing_dirs[i].ok()) deployments.deployments()[i]->mark_failed(missing_dirs[i]);
  // The speech side of transcribe deployments (live schedulers): stopped before the
  // deployments are (reset below), so no live stream submits to a stopping deployment.
  std::optional<prism::pipelines::transcribe::AsrServices> asr_services(std::in_place, deployments);
  prism::pipelines::transcribe::AsrServices& asr = *asr_services;

  // Off the HTTP threads, each worker with an OpenMP team of one (runtime/threads.h): requests'
  // media are fetched and decoded on the media pool; long-form transcriptions are jobs of the
  // job pool (the upload decoded, cut by the VAD deployment and turned into features there).
  // Reset after the server stops and before the ASR services and the deployments, which their
  // jobs use.
  const auto single_threaded = [] { omp_set_num_threads(1); };
  std::optional<serving::WorkPool> media_pool(std::in_place, "media", config.server.limits.num_media_threads,
                                              size_t(config.server.limits.max_media_queue), single_threaded);
  std::optional<pipelines::JobPool> job_pool(std::in_place,
                                             pipelines::JobPoolOptions{.name = "jobs",
                                                                       .workers = config.server.limits.num_job_threads,
                                                                       .max_queued = size_t(config.server.limits.max_job_queue),
                                                                       .on_thread_start = single_threaded},
                                             &metrics);

  api::Router router;
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  api::add_operational_routes(router, {&deployments, &metrics, now_s});
  api::add_echo_routes(router, deployments);
  api::add_embeddings_routes(router, deployments, *media_pool);
  api::add_chat_completions_routes(router, deployments, *media_pool);
  api::add_completions_routes(router, deployments);
  api::add_images_routes(router, deployments);
  if (Status s = api::add_search_routes(router, deployments); !s.ok()) return fail(s.message());
  api::add_realtime_routes(router, asr);
  api::add_audio_routes(router, deployments, asr, *job_pool);
  api::HttpServer server(http_options(config.server), std::move(router));

  deployments.start_all();
  if (Status s = server.start(); !s.ok()) {
    deployments.stop_all(std::chrono::milliseconds(0));
    std::string hint = s.code() == StatusCode::unavailable
                           ? " (is another server running there? choose another port with --port or [server] port)"
                           : "";
    return fail(s.message() + hint);
  }
  // The failure itself was logged (error) by its deployment; wait_loaded adds the warn line
  // for each one left out when the server goes on without it.
  if (Status s = deployments.wait_loaded(config.server.strict); !s.ok()) {
    server.request_shutdown();
    (void)server.run();
    deployments.stop_all(std::chrono::milliseconds(0));
    if (!config.server.strict) return fail(s.message());
    return fail(s.message() + " ([server] strict: a deployment that fails to load stops the server)");
  }
  std::string left_out;
  size_t num_served = 0;
  for (const auto& d : deployments.deployments()) {
    if (d->ready()) ++num_served;
    else left_out += (left_out.empty() ? "" : ", ") + d->name();
  }
  // Tests and scripts read the port from this line: its start stays "serving N deployment(s) on URL".
  PRISM_LOG_INFO("serving {} deployment(s) on http://{}:{}{}", num_served, config.server.host, server.port(),
                 left_out.empty() ? "" : " (failed to load, not served: " + left_out + ")");

  // Blocks until SIGTERM/SIGINT, then drains the HTTP side within the grace period: requests
  // in flight still reach the running deployments. Once it returns no client is left, so
  // what still waits in a queue is dropped at once (a batch in an engine still finishes).
  Status run = server.run();
  media_pool.reset();
  job_pool.reset();
  asr_services.reset();
  deployments.stop_all(std::chrono::milliseconds(0));
  if (!run.ok()) return fail(run.message());
  PRISM_LOG_INFO("stopped");
  return 0;
}

}  // namespace prism::app

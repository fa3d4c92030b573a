// The `prism` command line. getenv is read in app/ only: here (PRISM_THREADS, PRISM_ISA) and in
// app/compute_wait.cpp (PRISM_COMPUTE_WAIT, OMP_WAIT_POLICY, GOMP_SPINCOUNT).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/bench.h"
#include "app/commands.h"
#include "app/compute_wait.h"
#include "app/demo.h"
#include "app/embed.h"
#include "app/generate_image.h"
#include "app/transcribe.h"
#include "app/embed_queue.h"
#include "app/search.h"
#include "app/serve.h"
#include "app/tokenize.h"
#include "runtime/isa.h"
#include "runtime/threads.h"

namespace {

// The kernels' instruction-set tier: the CPU's best, or PRISM_ISA's (a lower one, to run
// another machine's paths here). Returns false, having said why, on a CPU below AVX2 or a
// PRISM_ISA this CPU cannot run.
bool configure_isa() {
  if (prism::Result<prism::Isa> best = prism::best_isa(); !best.has_value()) {
    std::fprintf(stderr, "prism: %s\n", best.status().message().c_str());
    return false;
  }
  if (prism::Status s = prism::select_isa_from_env(std::getenv("PRISM_ISA")); !s.ok()) {
    std::fprintf(stderr, "prism: PRISM_ISA: %s\n", s.message().c_str());
    return false;
  }
  return true;
}

// PRISM_THREADS sets the one OpenMP pool (shared with oneDNN); unset: the CPU allowance (the
// affinity mask, capped by the cgroup CPU quota; runtime/cpu_allowance.h).
// Returns false, having said why, when it is set to anything but a positive integer.
bool configure_threads() {
  long n = 0;
  if (const char* env = std::getenv("PRISM_THREADS"); env && *env) {
    char* end = nullptr;
    n = std::strtol(env, &end, 10);
    if (*end != '\0' || n <= 0 || n > 4096) {
      std::fprintf(stderr, "prism: PRISM_THREADS must be a positive integer, got '%s'\n", env);
      return false;
    }
  }
  prism::set_num_threads(static_cast<int>(n));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  prism::app::remember_argv(argv);
  CLI::App app{"Prism: a multimodal inference server", "prism"};
  app.set_version_flag("--version", std::string("prism ") + PRISM_VERSION);
  app.require_subcommand(1);

  auto* info = app.add_subcommand(
      "info", "CPU features, kernel tier and paths, threads, oneDNN version and GEMM speed on every tier");
  bool info_this_tier_gemm = false;
  info->add_flag("--this-tier-gemm", info_this_tier_gemm,
                 "Only measure the GEMM row of the tier in force (PRISM_ISA); prism info runs itself so per tier");

  auto* tokenize = app.add_subcommand("tokenize", "Tokenize stdin with a model's tokenizer; prints ids on one line");
  std::string tokenize_model;
  bool tokenize_no_special = false, tokenize_decode = false;
  tokenize->add_option("--model", tokenize_model,
                       "Model directory (tokenizer.json, tokenizer.model, vocab.json + merges.txt or vocab.txt), or one such file")
      ->required();
  tokenize->add_flag("--no-special", tokenize_no_special, "Leave out the BOS/CLS/SEP tokens the post-processor adds");
  tokenize->add_flag("--decode", tokenize_decode, "Read space-separated ids and print the text");

  auto* serve = app.add_subcommand("serve", "Serve the deployments of a config file (default: the demo set) over HTTP");
  prism::app::ServeOptions serve_options;
  std::optional<std::string> serve_host;
  std::optional<int64_t> serve_port;
  serve->add_option("--config", serve_options.config_path, "TOML config file ([server] and [[deployment]] tables)");
  serve->add_option("--host", serve_host, "Listen address (overrides [server] host; default 127.0.0.1)");
  serve->add_option("--port", serve_port, "Listen port, 0 for any free one (overrides [server] port; default 8080)");
  serve->add_option("--api-key", serve_options.api_keys,
                    "Require 'Authorization: Bearer KEY' (repeatable; replaces [server] api_keys)");
  serve->add_option("--media-cache-bytes", serve_options.media_cache_bytes,
                    "Bytes of encoder outputs (images, frames) kept in memory; 0 disables (overrides [server.media_cache] max_bytes)");
  serve->add_option("--media-cache-dir", serve_options.media_cache_dir,
                    "Persist the media cache in this directory across restarts (overrides [server.media_cache] dir)");
  serve->add_flag("--strict", serve_options.strict,
                  "Stop (exit 1) when any deployment fails to load, instead of serving the others (sets [server] strict)");
  serve->add_option("--demo-dir", serve_options.demo_dir,
                    "Where the demo set lives when no --config is given (default: " + prism::app::default_demo_dir() +
                        ")");
  // One flag per task for the single-model case: `prism serve --embed /path/to/hf/dir`.
  std::vector<std::pair<std::string, std::vector<std::string>>> serve_models;
  for (const std::string& task : prism::app::single_model_tasks()) serve_models.emplace_back(task, std::vector<std::string>{});
  for (auto& [task, paths] : serve_models)
    serve->add_option("--" + task, paths, "Serve this Hugging Face model directory as a '" + task + "' deployment (repeatable)")
        ->type_name("PATH");

  auto* demo = app.add_subcommand("demo", "The demo set: small random checkpoints of every supported family");
  demo->require_subcommand(1);
  auto* demo_init = demo->add_subcommand("init", "Write the demo set and its prism.toml into DIR");
  std::string demo_dir;
  demo_init->add_option("DIR", demo_dir, "Target directory (default: " + prism::app::default_demo_dir() + ")");

  prism::app::EmbedOptions embed_options;
  CLI::App* embed = prism::app::add_embed_command(app, embed_options);
  prism::app::EmbedQueueOptions embed_queue_options;
  const prism::app::EmbedQueueCommand embed_queue = prism::app::add_embed_queue_command(app, embed_queue_options);
  prism::app::SearchOptions search_options;
  CLI::App* search = prism::app::add_search_command(app, search_options);
  std::unique_ptr<prism::app::BenchCommand> bench = prism::app::add_bench_command(app);
  prism::app::TranscribeCommandOptions transcribe_options;
  CLI::App* transcribe = prism::app::add_transcribe_command(app, transcribe_options);
  prism::app::GenerateImageOptions generate_image_options;
  CLI::App* generate_image = prism::app::add_generate_image_command(app, generate_image_options);

  // Commands of later issues: each says it does not exist yet and exits non-zero.
  for (const char* name : {"chat", "speak", "tune"}) {
    app.add_subcommand(name, "(not available yet)")->allow_extras();
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // NOTE: the compute pool's wait policy must be in force before libgomp starts, so it may
  // execute this binary again (same argv, same PID). `prism serve` decides once its config is
  // read ([server] compute_wait), in run_serve; every other command here.
  if (!serve->parsed()) {
    if (prism::Status s = prism::app::apply_compute_wait(std::nullopt); !s.ok()) {
      std::fprintf(stderr, "prism: %s\n", s.message().c_str());
      return 2;
    }
  }
  if (!configure_isa() || !configure_threads()) return 2;

  if (info->parsed()) return prism::app::run_info(info_this_tier_gemm);
  if (tokenize->parsed()) return prism::app::run_tokenize(tokenize_model, tokenize_no_special, tokenize_decode);
  if (serve->parsed()) {
    serve_options.host = serve_host;
    serve_options.port = serve_port;
    for (const auto& [task, paths] : serve_models)
      for (const std::string& path : paths) serve_options.models.push_back({task, path, "--" + task});
    return prism::app::run_serve(serve_options);
  }
  if (demo_init->parsed()) return prism::app::run_demo_init(demo_dir);
  if (embed->parsed()) return prism::app::run_embed(embed_options);
  if (embed_queue.command->parsed()) return prism::app::run_embed_queue(embed_queue, embed_queue_options);
  if (search->parsed()) return prism::app::run_search(search_options);
  if (bench->parsed()) return prism::app::run_bench(*bench);
  if (transcribe->parsed()) return prism::app::run_transcribe(transcribe_options);
  if (generate_image->parsed()) return prism::app::run_generate_image(generate_image_options);
  const std::string name = app.get_subcommands().front()->get_name();
  std::fprintf(stderr, "prism: '%s' is not available yet in this build (see README: What works)\n",
               name.c_str());
  return 2;
}

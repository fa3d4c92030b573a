// The `prism` command line. getenv is read here and only here (PRISM_THREADS).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "app/commands.h"
#include "runtime/threads.h"

namespace {

// PRISM_THREADS sets the one OpenMP pool (shared with oneDNN); unset: one thread per core.
void configure_threads() {
  int n = 0;
  if (const char* env = std::getenv("PRISM_THREADS")) n = std::atoi(env);
  prism::set_num_threads(n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prism: a multimodal inference server", "prism"};
  app.set_version_flag("--version", std::string("prism ") + PRISM_VERSION);
  app.require_subcommand(1);

  auto* info = app.add_subcommand("info", "CPU features, threads, oneDNN version and measured GEMM speed");
  // Commands of later issues: each says it does not exist yet and exits non-zero.
  for (const char* name : {"serve", "embed", "chat", "transcribe", "speak", "tokenize", "bench", "tune"}) {
    app.add_subcommand(name, "(not available yet)")->allow_extras();
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  configure_threads();

  if (info->parsed()) return prism::app::run_info();
  const std::string name = app.get_subcommands().front()->get_name();
  std::fprintf(stderr, "prism: '%s' is not available yet in this build (see README: What works)\n",
               name.c_str());
  return 2;
}

// prism bench: a workload-aware load generator against any OpenAI-compatible server (see
// docs/bench.md). The flags live here; the work in tools/loadgen/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tools/loadgen/bench_run.h"

namespace CLI {
class App;
}

namespace prism::app {

// The `bench` subcommand's flags as CLI11 fills them.
struct BenchCommand {
  CLI::App* subcommand = nullptr;  // owned by the parent CLI::App
  tools::loadgen::BenchOptions options;
  std::string load;                // "open", "closed" or "" (open when --rate is given)
  std::string arrival = "poisson";
  std::string input_tokens, output_tokens, doc_tokens;  // length specs; "" keeps the workload's
  std::string extra_body;          // JSON object text
  std::vector<double> sweep;
  std::string json_path, html_path;
  std::vector<std::string> compare;  // two report files
  bool quiet = false, no_metrics = false;
  bool concurrency_given = false, rate_given = false;

  bool parsed() const;
};

// Adds `prism bench` to `app`. Keep the result alive until run_bench returns.
std::unique_ptr<BenchCommand> add_bench_command(CLI::App& app);

// Runs the parsed command: a benchmark (summary on stdout, progress on stderr) or
// --compare. Exit code: 0; 1 when the run failed or no request succeeded; 2 for bad usage.
int run_bench(BenchCommand& command);

}  // namespace prism::app

// tools/loadgen/bench_run.h: one `prism bench` invocation: pick the model, then for each load
// level (one, or each of a sweep) scrape /metrics, drive the load, scrape again, and
// summarize; finally the saturation point. Writing files and printing belong to the caller.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status.h"
#include "tools/loadgen/bench_result.h"
#include "tools/loadgen/load_runner.h"
#include "tools/loadgen/workload.h"

namespace prism::tools::loadgen {

struct BenchOptions {
  std::string url;                    // http://host:port of an OpenAI-compatible server
  std::string api_key;
  std::string workload;               // a name of workload_names()
  WorkloadOptions shape;              // shape.model empty: the first model of the workload's task
  LoadPlan plan;                      // mode, load, length, warm-up, timeout, seed
  std::vector<double> sweep;          // load levels (rates or concurrencies); empty: the plan's one
  bool scrape_metrics = true;
  std::string metrics_path = "/metrics";

  // invalid_argument naming the flag at fault.
  Status validate() const;
};

// Runs every level. Progress lines go to `progress` (nullptr: silent). Errors: bad options,
// a URL that does not resolve, no model to use. A server that fails requests is not an
// error here: its failures are counted in the report.
Result<BenchReport> run_bench(const BenchOptions& options, std::FILE* progress);

}  // namespace prism::tools::loadgen

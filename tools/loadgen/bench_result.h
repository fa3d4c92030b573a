// tools/loadgen/bench_result.h: what a run found, as numbers: per load level ("point") the
// throughputs, latency percentiles, errors by kind and the server's metric deltas; for a
// sweep, the saturation point. Built from records, written to and read from JSON (the format
// --json writes and --compare reads). No I/O here beyond JSON values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tools/loadgen/latency_stats.h"
#include "tools/loadgen/load_runner.h"
#include "tools/loadgen/prometheus_text.h"

namespace prism::tools::loadgen {

inline constexpr int kReportFormatVersion = 1;

struct PointResult {
  LoadMode mode = LoadMode::closed;
  double load = 0;  // the concurrency (closed) or the offered rate per second (open)
  int64_t num_requests = 0, num_ok = 0, num_warmup = 0;
  double window_s = 0;   // first measured start to last measured end
  double elapsed_s = 0;  // the whole run of this point, warm-up included
  std::map<std::string, int64_t> errors;              // kind -> count
  std::map<std::string, std::string> error_examples;  // kind -> the first detail seen
  // Per second over the window, successes only: "requests" and every unit the workload
  // counts ("docs", "input_tokens", "output_tokens", ...).
  std::map<std::string, double> throughput_per_s;
  std::map<std::string, double> totals;  // the same units summed over the successes
  // Seconds: "e2e" (every success) and the workload's series ("ttft", "itl", "tpot").
  std::map<std::string, LatencySummary> latency_s;
  std::vector<MetricDelta> server;  // /metrics after minus before; empty when not scraped
  std::string server_note;          // why there are no server figures, when there are none

  int64_t num_errors() const { return num_requests - num_ok; }
  double error_rate() const { return num_requests > 0 ? static_cast<double>(num_errors()) / num_requests : 0.0; }
};

// The sweep's saturation point. NOTE (definitions, also in docs/bench.md):
//   open loop:   the server falls behind at the first rate whose achieved request rate is
//                under 90% of the offered rate or whose error rate is over 5%; the
//                saturation point is the last rate before it (the highest sustained rate).
//   closed loop: the lowest concurrency whose throughput is at least 90% of the best
//                throughput of the sweep (past it, more concurrency buys latency, not
//                throughput); not reached when the last step still grew throughput by 10%+.
struct Saturation {
  bool reached = false;
  int index = -1;  // into points sorted as given; -1 when no point qualifies
  std::string reason;
};
Saturation find_saturation(const std::vector<PointResult>& points);

struct BenchReport {
  nlohmann::json config;      // the run's options and the workload's shape
  std::string headline_unit;  // the workload's main throughput unit
  std::vector<PointResult> points;
  Saturation saturation;
};

// The point's figures from its records.
PointResult summarize_point(const LoadPlan& plan, const LoadRecords& records);

nlohmann::json to_json(const BenchReport& report);
// invalid_argument naming what is missing or of the wrong type.
Result<BenchReport> report_from_json(const nlohmann::json& j);

// Latency series in reading order: e2e, ttft, itl, tpot, then any other by name.
std::vector<std::string> ordered_series(const std::map<std::string, LatencySummary>& latency);
// Throughput units in reading order: requests, the headline unit, then the others by name.
std::vector<std::string> ordered_units(const std::map<std::string, double>& throughput, const std::string& headline);
// A unit's name for people: "output_tokens" -> "output tokens/s", "requests" -> "req/s".
std::string unit_rate_label(const std::string& unit);

// "concurrency 4" or "rate 8/s".
std::string load_label(LoadMode mode, double load);
std::string_view mode_name(LoadMode mode);

}  // namespace prism::tools::loadgen

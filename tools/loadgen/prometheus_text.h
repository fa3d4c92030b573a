// tools/loadgen/prometheus_text.h: reading a server's /metrics (Prometheus text exposition
// 0.0.4, which OpenMetrics text also parses as) and the change between two scrapes: counter
// deltas, histogram count/sum/mean and quantiles estimated from bucket deltas. It knows no
// metric by name; the report picks what to show.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace prism::tools::loadgen {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

struct MetricSample {
  std::string name;  // as written: prism_queue_seconds_bucket
  MetricLabels labels;
  double value = 0;
};

struct MetricsSnapshot {
  std::map<std::string, std::string> types;  // family -> counter, gauge, histogram, summary, untyped
  std::vector<MetricSample> samples;
};

// Parses the text; invalid_argument naming the line for a sample line that does not parse.
// Unknown comment lines are skipped.
Result<MetricsSnapshot> parse_prometheus_text(std::string_view text);

// One family's change between two scrapes, summed over the series that match the filter.
struct MetricDelta {
  std::string name;
  std::string type;  // counter, gauge, histogram (a summary reads as a histogram without buckets)
  double delta = 0;                // counter: after - before (after when the counter was reset)
  double before = 0, after = 0;    // gauge: the values at both scrapes
  double count = 0, sum = 0;       // histogram: delta of _count and _sum
  std::optional<double> p50, p99;  // histogram: estimated from bucket deltas (see below)
  // Counters with several series: each series' delta, labels written as a="x",b="y".
  std::vector<std::pair<std::string, double>> series;

  std::optional<double> mean() const {
    return count > 0 ? std::optional<double>(sum / count) : std::nullopt;
  }
};

// Families that changed (counters with a non-zero delta, histograms with new observations)
// and every gauge, sorted by name. `model`: when non-empty, a series labelled deployment=,
// model_name= or model= with another value is left out (several deployments share a server).
std::vector<MetricDelta> diff_metrics(const MetricsSnapshot& before, const MetricsSnapshot& after,
                                      std::string_view model);

// The q-quantile (q in [0, 1]) of a histogram from its cumulative buckets (upper bound,
// count), as Prometheus's histogram_quantile does: linear inside the bucket holding the rank,
// the first bucket starting at 0; a rank in the +Inf bucket answers the highest finite bound.
// nullopt without observations.
std::optional<double> histogram_quantile(double q, std::vector<std::pair<double, double>> cumulative_buckets);

}  // namespace prism::tools::loadgen

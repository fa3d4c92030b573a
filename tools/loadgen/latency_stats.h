// tools/loadgen/latency_stats.h: the timing math of a run: percentiles, summaries of samples,
// the measurement window and rates. Pure functions on numbers: no clock, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace prism::tools::loadgen {

// The p-th percentile (p in [0, 100]) of `sorted` (ascending), by linear interpolation
// between closest ranks: h = (n - 1) * p / 100, x[floor h] + (h - floor h) * (x[floor h + 1]
// - x[floor h]). This is Hyndman & Fan's definition 7, NumPy's default ("linear") and
// Excel's PERCENTILE.INC. nullopt when `sorted` is empty.
std::optional<double> percentile_sorted(std::span<const double> sorted, double p);

// The percentiles every latency series reports.
struct LatencySummary {
  int64_t count = 0;
  double mean = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p99 = 0;
};

// Summary of samples in any order (sorted here); count 0 and zeros when empty.
LatencySummary summarize(std::vector<double> samples);

// Start and end of the measured requests: the first start and the last end. Rates divide by
// its length.
struct Window {
  double start_s = 0, end_s = 0;
  double length_s() const { return end_s > start_s ? end_s - start_s : 0.0; }
};
struct Interval {
  double start_s = 0, end_s = 0;
};
Window measurement_window(std::span<const Interval> requests);

// amount / seconds; 0 when the window is empty (a run that measured nothing has no rate).
double rate_per_s(double amount, double seconds);

}  // namespace prism::tools::loadgen

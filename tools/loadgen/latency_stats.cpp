// tools/loadgen/latency_stats.cpp: percentiles (definition in the header), summaries, windows.
#include "tools/loadgen/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace prism::tools::loadgen {

std::optional<double> percentile_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) return std::nullopt;
  p = std::clamp(p, 0.0, 100.0);
  const double h = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

LatencySummary summarize(std::vector<double> samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.count = static_cast<int64_t>(samples.size());
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  s.p50 = *percentile_sorted(samples, 50);
  s.p90 = *percentile_sorted(samples, 90);
  s.p99 = *percentile_sorted(samples, 99);
  return s;
}

Window measurement_window(std::span<const Interval> requests) {
  Window w;
  if (requests.empty()) return w;
  w.start_s = requests.front().start_s;
  w.end_s = requests.front().end_s;
  for (const Interval& r : requests) {
    w.start_s = std::min(w.start_s, r.start_s);
    w.end_s = std::max(w.end_s, r.end_s);
  }
  return w;
}

double rate_per_s(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

}  // namespace prism::tools::loadgen

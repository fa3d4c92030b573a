// serving/metrics.h: the process's metrics registry, rendered as Prometheus text exposition
// format 0.0.4 at /metrics. Counters, gauges and histograms keyed by name + labels.
// NOTE: the hot path (inc/set/observe) touches only atomics; the registry's mutex guards
// get-or-create and rendering, so callers look a series up once and keep the reference.
// References stay valid for the registry's lifetime. It must not know about HTTP or engines.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prism::serving {

// Label pairs in the order they are rendered, e.g. {{"deployment", "minilm"}, {"status", "ok"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Buckets are upper bounds (le), strictly increasing; +Inf is implicit. Counts are kept per
// bucket (not cumulative) so observe() is one increment; render() accumulates.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket counts, bounds().size() + 1 entries (the last is the +Inf overflow bucket).
  std::vector<uint64_t> bucket_counts() const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Get-or-create the series `name{labels}`. The first call for a name fixes its help text
  // and type (a later call with another type is a bug: PRISM_CHECK); for histograms the
  // first call also fixes the buckets.
  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, std::span<const double> bounds,
                       const Labels& labels = {});
  // A gauge computed at render time (process memory, queue sizes owned elsewhere). `fn` runs
  // on the rendering thread under the registry lock and must be cheap and non-blocking.
  void gauge_callback(std::string_view name, std::string_view help, const Labels& labels,
                      std::function<double()> fn);

  // Prometheus text exposition 0.0.4: families sorted by name, series sorted by labels.
  std::string render() const;

 private:
  struct Family;
  Family& family(std::string_view name, std::string_view help, int type);

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
};

// Registers prism_process_resident_memory_bytes (read from /proc/self/statm at render time).
void register_process_metrics(MetricsRegistry& registry);

// Bucket sets shared by the deployment metrics.
std::span<const double> latency_buckets_seconds();  // 0.5 ms .. 60 s
std::span<const double> batch_size_buckets();       // 1 .. 1024, powers of two
std::span<const double> batch_token_buckets();      // 16 .. 262144, powers of four

// Prometheus number text: integers and ordinary magnitudes in plain decimal, shortest form
// that round-trips; +Inf, -Inf, NaN spelled as the format wants.
std::string format_metric_value(double v);

}  // namespace prism::serving

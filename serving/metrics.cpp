// serving/metrics.cpp: registry storage and the Prometheus 0.0.4 text renderer.
#include "serving/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/check.h"

namespace prism::serving {

namespace {

enum FamilyType { kCounter = 0, kGauge = 1, kHistogram = 2 };
constexpr std::string_view kTypeNames[] = {"counter", "gauge", "histogram"};

// HELP text escapes backslash and newline; label values also escape the double quote.
std::string escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
}

// `{a="x",b="y"}` with an optional extra pair (le for histogram buckets); "" when empty.
std::string label_text(const Labels& labels, std::string_view extra_key = {},
                       std::string_view extra_value = {}) {
  if (labels.empty() && extra_key.empty()) return {};
  std::string out = "{";
  bool first = true;
  auto add = [&](std::string_view k, std::string_view v) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    out += escape(v, true);
    out += '"';
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (!extra_key.empty()) add(extra_key, extra_value);
  out += '}';
  return out;
}

}  // namespace

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::array<char, 64> buf;
  double mag = std::fabs(v);
  // Plain decimal reads best for counts and seconds; scientific only for extreme magnitudes,
  // where fixed notation would print hundreds of digits.
  auto fmt = (v == 0.0 || (mag >= 1e-6 && mag < 1e15)) ? std::chars_format::fixed
                                                       : std::chars_format::general;
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v, fmt);
  PRISM_CHECK(res.ec == std::errc());
  return std::string(buf.data(), res.ptr);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i + 1 < bounds_.size(); ++i) PRISM_CHECK_MSG(bounds_[i] < bounds_[i + 1], "buckets must increase");
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  // le semantics: a value equal to a bound belongs to that bucket.
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

// One metric name: its help, type and series. Series live in unique_ptrs so the references
// handed out survive later insertions.
struct MetricsRegistry::Family {
  std::string help;
  int type = kCounter;
  std::vector<double> bounds;  // histograms only
  std::map<Labels, std::unique_ptr<Counter>> counters;
  std::map<Labels, std::unique_ptr<Gauge>> gauges;
  std::map<Labels, std::function<double()>> gauge_fns;
  std::map<Labels, std::unique_ptr<Histogram>> histograms;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Family& MetricsRegistry::family(std::string_view name, std::string_view help, int type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    auto f = std::make_unique<Family>();
    f->help = std::string(help);
    f->type = type;
    it = families_.emplace(std::string(name), std::move(f)).first;
  }
  PRISM_CHECK_MSG(it->second->type == type, "metric registered twice with different types");
  return *it->second;
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto& slot = family(name, help, kCounter).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto& slot = family(name, help, kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      std::span<const double> bounds, const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = family(name, help, kHistogram);
  if (f.histograms.empty() && f.bounds.empty()) f.bounds.assign(bounds.begin(), bounds.end());
  auto& slot = f.histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(f.bounds);
  return *slot;
}

void MetricsRegistry::gauge_callback(std::string_view name, std::string_view help, const Labels& labels,
                                     std::function<double()> fn) {
  std::lock_guard lock(mu_);
  family(name, help, kGauge).gauge_fns[labels] = std::move(fn);
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + escape(f->help, false) + "\n";
    out += "# TYPE " + name + " " + std::string(kTypeNames[f->type]) + "\n";
    for (const auto& [labels, c] : f->counters)
      out += name + label_text(labels) + " " + format_metric_value(c->value()) + "\n";
    // Stored and computed gauges interleave in label order so the output stays sorted.
    std::map<Labels, double> gauges;
    for (const auto& [labels, g] : f->gauges) gauges[labels] = g->value();
    for (const auto& [labels, fn] : f->gauge_fns) gauges[labels] = fn();
    for (const auto& [labels, v] : gauges)
      out += name + label_text(labels) + " " + format_metric_value(v) + "\n";
    for (const auto& [labels, h] : f->histograms) {
      // Read the buckets first and derive the count from them, so a scrape racing with
      // observe() still shows a +Inf bucket equal to _count.
      std::vector<uint64_t> counts = h->bucket_counts();
      uint64_t cumulative = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        cumulative += counts[i];
        std::string le = i < h->bounds().size() ? format_metric_value(h->bounds()[i]) : "+Inf";
        out += name + "_bucket" + label_text(labels, "le", le) + " " + std::to_string(cumulative) + "\n";
      }
      out += name + "_sum" + label_text(labels) + " " + format_metric_value(h->sum()) + "\n";
      out += name + "_count" + label_text(labels) + " " + std::to_string(cumulative) + "\n";
    }
  }
  return out;
}

namespace {

double resident_memory_bytes() {
  // statm: size resident shared text lib data dt, in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0.0;
  unsigned long long size = 0, resident = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0.0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

constexpr double kLatencyBuckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
constexpr double kBatchSizeBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
constexpr double kBatchTokenBuckets[] = {16, 64, 256, 1024, 4096, 16384, 65536, 262144};

}  // namespace

void register_process_metrics(MetricsRegistry& registry) {
  registry.gauge_callback("prism_process_resident_memory_bytes", "Resident memory of the prism process in bytes.",
                          {}, resident_memory_bytes);
}

std::span<const double> latency_buckets_seconds() { return kLatencyBuckets; }
std::span<const double> batch_size_buckets() { return kBatchSizeBuckets; }
std::span<const double> batch_token_buckets() { return kBatchTokenBuckets; }

}  // namespace prism::serving

// tools/loadgen/terminal_report.cpp: the terminal summary.
#include "tools/loadgen/terminal_report.h"

#include <algorithm>
#include <array>

#include "tools/loadgen/text_table.h"

namespace prism::tools::loadgen {

namespace {

// Server metrics worth a line: queue time, batch sizes, cache hits and the like first. The
// JSON and HTML reports keep all of them.
int server_metric_rank(const MetricDelta& d) {
  constexpr std::array<const char*, 6> kKeywords = {"queue", "batch", "cache", "time_to_first", "request", "token"};
  for (size_t i = 0; i < kKeywords.size(); ++i)
    if (d.name.find(kKeywords[i]) != std::string::npos) return static_cast<int>(i);
  return static_cast<int>(kKeywords.size());
}

std::string server_metric_line(const MetricDelta& d) {
  const bool seconds = d.name.ends_with("_seconds");
  auto value = [&](double v) { return seconds ? format_ms(v) + " ms" : format_number(v); };
  if (d.type == "histogram") {
    // Only the mean: quantiles from coarse buckets mislead (the JSON and HTML keep them).
    return d.name + ": " + format_number(d.count) + " observed, mean " + value(d.mean().value_or(0));
  }
  std::string s = d.name + ": +" + format_number(d.delta);
  for (size_t i = 0; i < d.series.size() && i < 4; ++i)
    s += (i == 0 ? " (" : ", ") + d.series[i].first + " +" + format_number(d.series[i].second);
  if (!d.series.empty()) s += d.series.size() > 4 ? ", ...)" : ")";
  return s;
}

}  // namespace

std::string format_point_summary(const PointResult& p, const std::string& headline_unit) {
  std::string out = load_label(p.mode, p.load) + ": " + std::to_string(p.num_requests) + " requests (" +
                    std::to_string(p.num_ok) + " ok, " + std::to_string(p.num_errors()) + " errors) in " +
                    format_number(p.window_s) + " s";
  if (p.num_warmup > 0) out += ", after " + std::to_string(p.num_warmup) + " warm-up";
  out += "\n  throughput:";
  for (const std::string& unit : ordered_units(p.throughput_per_s, headline_unit))
    out += "  " + format_number(p.throughput_per_s.at(unit)) + " " + unit_rate_label(unit);
  out += "\n";
  if (!p.latency_s.empty()) {
    std::vector<std::vector<std::string>> rows = {{"latency (ms)", "p50", "p90", "p99", "mean", "max", "samples"}};
    for (const std::string& name : ordered_series(p.latency_s)) {
      const LatencySummary& s = p.latency_s.at(name);
      rows.push_back({name, format_ms(s.p50), format_ms(s.p90), format_ms(s.p99), format_ms(s.mean), format_ms(s.max),
                      std::to_string(s.count)});
    }
    out += format_table(rows);
  }
  if (!p.errors.empty()) {
    out += "  errors:";
    for (const auto& [kind, n] : p.errors) {
      std::string example = p.error_examples.contains(kind) ? p.error_examples.at(kind) : "";
      if (example.size() > 80) example = example.substr(0, 77) + "...";
      out += "\n    " + kind + " " + std::to_string(n) + (example.empty() ? "" : " (" + example + ")");
    }
    out += "\n";
  }
  std::vector<const MetricDelta*> shown;
  for (const MetricDelta& d : p.server)
    if (d.type != "gauge") shown.push_back(&d);
  if (!shown.empty()) {
    std::stable_sort(shown.begin(), shown.end(),
                     [](const MetricDelta* a, const MetricDelta* b) { return server_metric_rank(*a) < server_metric_rank(*b); });
    if (shown.size() > 8) shown.resize(8);
    out += "  server (/metrics, after minus before):";
    for (const MetricDelta* d : shown) out += "\n    " + server_metric_line(*d);
    out += "\n";
  } else if (!p.server_note.empty()) {  // gauges alone are in the JSON and HTML reports
    out += "  server: " + p.server_note + "\n";
  }
  return out;
}

std::string format_report_summary(const BenchReport& r) {
  std::string out;
  for (const PointResult& p : r.points) out += format_point_summary(p, r.headline_unit);
  if (r.points.size() < 2) return out;
  const std::string headline = r.headline_unit;
  std::vector<std::vector<std::string>> rows = {{"load", "req/s"}};
  if (headline != "requests") rows[0].push_back(unit_rate_label(headline));
  rows[0].insert(rows[0].end(), {"e2e p50 ms", "e2e p99 ms"});
  const bool ttft = std::any_of(r.points.begin(), r.points.end(), [](const PointResult& p) { return p.latency_s.contains("ttft"); });
  if (ttft) rows[0].insert(rows[0].end(), {"ttft p50 ms", "ttft p99 ms"});
  rows[0].push_back("errors");
  for (size_t i = 0; i < r.points.size(); ++i) {
    const PointResult& p = r.points[i];
    auto rate = [&](const std::string& unit) {
      auto it = p.throughput_per_s.find(unit);
      return it == p.throughput_per_s.end() ? std::string("-") : format_number(it->second);
    };
    auto ms = [&](const char* series, double LatencySummary::*field) {
      auto it = p.latency_s.find(series);
      return it == p.latency_s.end() ? std::string("-") : format_ms(it->second.*field);
    };
    const bool saturation = r.saturation.reached && static_cast<int>(i) == r.saturation.index;
    std::vector<std::string> row = {load_label(p.mode, p.load) + (saturation ? " *" : ""),
                                    rate("requests")};
    if (headline != "requests") row.push_back(rate(headline));
    row.insert(row.end(), {ms("e2e", &LatencySummary::p50), ms("e2e", &LatencySummary::p99)});
    if (ttft) row.insert(row.end(), {ms("ttft", &LatencySummary::p50), ms("ttft", &LatencySummary::p99)});
    row.push_back(std::to_string(p.num_errors()));
    rows.push_back(std::move(row));
  }
  out += "sweep:\n" + format_table(rows);
  out += "saturation" + std::string(r.saturation.reached ? " (*)" : "") + ": " + r.saturation.reason + "\n";
  return out;
}

}  // namespace prism::tools::loadgen

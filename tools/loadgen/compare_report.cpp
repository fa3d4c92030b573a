// tools/loadgen/compare_report.cpp: side-by-side tables with ratios.
#include "tools/loadgen/compare_report.h"

#include <cmath>
#include <set>

#include "tools/loadgen/text_table.h"

namespace prism::tools::loadgen {

namespace {

std::string ratio(double a, double b) {
  if (!(a != 0) || !std::isfinite(a) || !std::isfinite(b)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "x%.2f", b / a);
  return buf;
}

std::string describe_run(const BenchReport& r) {
  const nlohmann::json w = r.config.value("workload", nlohmann::json::object());
  return w.value("workload", "?") + " on " + r.config.value("url", "?") + " (model " + w.value("model", "?") + ")";
}

void add_row(std::vector<std::vector<std::string>>& rows, const std::string& name, std::optional<double> a,
             std::optional<double> b, double scale = 1) {
  if (!a && !b) return;
  rows.push_back({name, a ? format_number(*a * scale) : "-", b ? format_number(*b * scale) : "-",
                  a && b ? ratio(*a, *b) : "-"});
}

std::optional<double> find(const std::map<std::string, double>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? std::nullopt : std::optional<double>(it->second);
}

std::string compare_points(const PointResult& a, const PointResult& b, const BenchReport& ra, const std::string& name_a,
                           const std::string& name_b) {
  std::vector<std::vector<std::string>> rows = {{"", name_a, name_b, "b/a"}};
  std::map<std::string, double> units = a.throughput_per_s;
  units.insert(b.throughput_per_s.begin(), b.throughput_per_s.end());
  for (const std::string& u : ordered_units(units, ra.headline_unit))
    add_row(rows, unit_rate_label(u), find(a.throughput_per_s, u), find(b.throughput_per_s, u));
  add_row(rows, "requests", static_cast<double>(a.num_requests), static_cast<double>(b.num_requests));
  add_row(rows, "error rate %", a.error_rate() * 100, b.error_rate() * 100);
  std::map<std::string, LatencySummary> series = a.latency_s;
  series.insert(b.latency_s.begin(), b.latency_s.end());
  for (const std::string& s : ordered_series(series)) {
    auto ia = a.latency_s.find(s), ib = b.latency_s.find(s);
    for (auto [label, field] : {std::pair{"p50", &LatencySummary::p50}, std::pair{"p90", &LatencySummary::p90},
                                std::pair{"p99", &LatencySummary::p99}}) {
      add_row(rows, s + " " + label + " ms", ia == a.latency_s.end() ? std::nullopt : std::optional(ia->second.*field),
              ib == b.latency_s.end() ? std::nullopt : std::optional(ib->second.*field), 1e3);
    }
  }
  // Server histograms both runs have (queue time, batch size, ...): their means.
  for (const MetricDelta& da : a.server) {
    if (da.type != "histogram") continue;
    for (const MetricDelta& db : b.server) {
      if (db.name != da.name) continue;
      const double scale = da.name.ends_with("_seconds") ? 1e3 : 1;
      add_row(rows, da.name + " mean" + (scale != 1 ? " ms" : ""), da.mean(), db.mean(), scale);
    }
  }
  return format_table(rows);
}

}  // namespace

std::string format_comparison(const BenchReport& a, const BenchReport& b, const std::string& name_a,
                              const std::string& name_b) {
  std::string out = "a: " + name_a + ": " + describe_run(a) + "\nb: " + name_b + ": " + describe_run(b) + "\n";
  const nlohmann::json wa = a.config.value("workload", nlohmann::json::object());
  const nlohmann::json wb = b.config.value("workload", nlohmann::json::object());
  if (wa != wb) out += "note: the workloads' shapes differ; ratios compare different requests\n";
  // Pair levels by load value; by position when no value is shared.
  std::vector<std::pair<int, int>> pairs;
  std::set<int> used_b;
  for (size_t i = 0; i < a.points.size(); ++i)
    for (size_t j = 0; j < b.points.size(); ++j)
      if (!used_b.contains(static_cast<int>(j)) && a.points[i].mode == b.points[j].mode && a.points[i].load == b.points[j].load) {
        pairs.emplace_back(static_cast<int>(i), static_cast<int>(j));
        used_b.insert(static_cast<int>(j));
        break;
      }
  if (pairs.empty())
    for (size_t i = 0; i < std::min(a.points.size(), b.points.size()); ++i) pairs.emplace_back(i, i), used_b.insert(i);
  std::set<int> used_a;
  for (auto [i, j] : pairs) {
    used_a.insert(i);
    const PointResult &pa = a.points[i], &pb = b.points[j];
    std::string title = load_label(pa.mode, pa.load);
    if (pa.mode != pb.mode || pa.load != pb.load) title += " vs " + load_label(pb.mode, pb.load);
    out += "\n" + title + ":\n" + compare_points(pa, pb, a, "a", "b");
  }
  for (size_t i = 0; i < a.points.size(); ++i)
    if (!used_a.contains(static_cast<int>(i))) out += "\nonly in a: " + load_label(a.points[i].mode, a.points[i].load) + "\n";
  for (size_t j = 0; j < b.points.size(); ++j)
    if (!used_b.contains(static_cast<int>(j))) out += "\nonly in b: " + load_label(b.points[j].mode, b.points[j].load) + "\n";
  if (a.points.size() > 1 || b.points.size() > 1)
    out += "\nsaturation:\n  a: " + a.saturation.reason + "\n  b: " + b.saturation.reason + "\n";
  return out;
}

}  // namespace prism::tools::loadgen

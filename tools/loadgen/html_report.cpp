// tools/loadgen/html_report.cpp: the HTML page around the charts.
#include "tools/loadgen/html_report.h"

#include <algorithm>

#include "tools/loadgen/svg_chart.h"
#include "tools/loadgen/text_table.h"

namespace prism::tools::loadgen {

namespace {

constexpr const char* kP50 = "#4e79a7";
constexpr const char* kP90 = "#f28e2b";
constexpr const char* kP99 = "#e15759";

constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1320px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; margin-bottom: 16px; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card .v { font-size: 20px; font-weight: 600; } .card .k { color: #666; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
svg.chart { border: 1px solid #e4e4e4; border-radius: 6px; background: #fff; }
svg .title { font-size: 14px; font-weight: 600; fill: #222; }
svg .tick, svg .value { font-size: 11px; fill: #555; } svg .label { font-size: 12px; fill: #333; }
svg .legend { font-size: 12px; fill: #333; } svg .grid { stroke: #eee; } svg .axis { stroke: #888; }
svg .marker { stroke: #555; stroke-dasharray: 4 3; } svg .marker-label { font-size: 11px; fill: #333; }
table { border-collapse: collapse; margin: 6px 0; } td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f6f6f6; } td:first-child, th:first-child { text-align: left; }
tr.sat td { background: #fff7e0; }
pre { background: #f6f6f6; padding: 10px; border-radius: 6px; overflow-x: auto; }
)";

std::string esc(const std::string& s) { return xml_escape(s); }

std::string table(const std::vector<std::vector<std::string>>& rows, int highlight_row = -1) {
  std::string out = "<table>\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    out += static_cast<int>(r) == highlight_row ? "<tr class=\"sat\">" : "<tr>";
    for (const std::string& cell : rows[r]) out += (r == 0 ? "<th>" : "<td>") + esc(cell) + (r == 0 ? "</th>" : "</td>");
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

double rate_of(const PointResult& p, const std::string& unit) {
  auto it = p.throughput_per_s.find(unit);
  return it == p.throughput_per_s.end() ? 0.0 : it->second;
}

// p50/p90/p99 of one series (ms) against the headline throughput, one line each.
std::string latency_curve(const BenchReport& r, const std::string& series, const std::string& title) {
  LineChart c;
  c.title = title;
  c.x_label = "achieved " + unit_rate_label(r.headline_unit);
  c.y_label = series + " latency (ms)";
  const std::pair<const char*, double LatencySummary::*> pcts[] = {
      {"p50", &LatencySummary::p50}, {"p90", &LatencySummary::p90}, {"p99", &LatencySummary::p99}};
  const char* colors[] = {kP50, kP90, kP99};
  std::vector<size_t> order(r.points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.points[a].load < r.points[b].load; });
  for (size_t k = 0; k < 3; ++k) {
    LineSeries s{pcts[k].first, colors[k], {}};
    for (size_t i : order) {
      const PointResult& p = r.points[i];
      auto it = p.latency_s.find(series);
      if (it == p.latency_s.end()) continue;
      s.points.push_back({rate_of(p, r.headline_unit), it->second.*pcts[k].second * 1e3,
                          load_label(p.mode, p.load) + ", " + format_ms(it->second.*pcts[k].second) + " ms"});
    }
    c.series.push_back(std::move(s));
  }
  if (r.saturation.index >= 0 && r.saturation.reached) {
    c.marker_x = rate_of(r.points[r.saturation.index], r.headline_unit);
    c.marker_label = "saturation";
  }
  return render_line_chart(c);
}

std::string throughput_curve(const BenchReport& r) {
  if (r.points.empty()) return "";
  const bool open = r.points.front().mode == LoadMode::open;
  LineChart c;
  c.title = "Throughput against load";
  c.x_label = open ? "offered rate (req/s)" : "concurrency";
  c.y_label = "achieved req/s";
  std::vector<size_t> order(r.points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.points[a].load < r.points[b].load; });
  LineSeries achieved{"achieved", kP50, {}};
  LineSeries offered{"offered", "#999", {}, /*dashed=*/true};
  for (size_t i : order) {
    const PointResult& p = r.points[i];
    achieved.points.push_back({p.load, rate_of(p, "requests"), format_number(rate_of(p, "requests")) + " req/s"});
    if (open) offered.points.push_back({p.load, p.load, format_number(p.load) + " req/s offered"});
  }
  c.series.push_back(std::move(achieved));
  if (open) c.series.push_back(std::move(offered));
  if (r.saturation.index >= 0 && r.saturation.reached) {
    c.marker_x = r.points[r.saturation.index].load;
    c.marker_label = "saturation";
  }
  return render_line_chart(c);
}

std::string percentile_bars(const BenchReport& r, const std::string& series) {
  BarChart c;
  c.title = series + " percentiles (ms)";
  c.y_label = "ms";
  c.bar_names = {"p50", "p90", "p99"};
  c.colors = {kP50, kP90, kP99};
  for (const PointResult& p : r.points) {
    auto it = p.latency_s.find(series);
    if (it == p.latency_s.end()) continue;
    const LatencySummary& s = it->second;
    c.groups.push_back({load_label(p.mode, p.load), {s.p50 * 1e3, s.p90 * 1e3, s.p99 * 1e3}});
  }
  c.width = std::max(420, std::min(1280, 120 + 110 * static_cast<int>(c.groups.size())));
  return render_bar_chart(c);
}

std::vector<std::string> all_series(const BenchReport& r) {
  std::map<std::string, LatencySummary> any;
  for (const PointResult& p : r.points)
    for (const auto& [name, s] : p.latency_s) any[name] = s;
  return ordered_series(any);
}

std::string results_table(const BenchReport& r) {
  std::map<std::string, double> any_units;
  for (const PointResult& p : r.points)
    for (const auto& [u, v] : p.throughput_per_s) any_units[u] = v;
  const std::vector<std::string> units = ordered_units(any_units, r.headline_unit);
  const std::vector<std::string> series = all_series(r);
  std::vector<std::vector<std::string>> rows(1);
  rows[0] = {"load", "requests", "ok", "errors", "window s"};
  for (const std::string& u : units) rows[0].push_back(unit_rate_label(u));
  for (const std::string& s : series)
    for (const char* p : {"p50", "p90", "p99"}) rows[0].push_back(s + " " + p + " ms");
  for (const PointResult& p : r.points) {
    std::vector<std::string> row = {load_label(p.mode, p.load), std::to_string(p.num_requests), std::to_string(p.num_ok),
                                    std::to_string(p.num_errors()), format_number(p.window_s)};
    for (const std::string& u : units) row.push_back(format_number(rate_of(p, u)));
    for (const std::string& s : series) {
      auto it = p.latency_s.find(s);
      for (double LatencySummary::*f : {&LatencySummary::p50, &LatencySummary::p90, &LatencySummary::p99})
        row.push_back(it == p.latency_s.end() ? "-" : format_ms(it->second.*f));
    }
    rows.push_back(std::move(row));
  }
  return table(rows, r.saturation.reached ? r.saturation.index + 1 : -1);
}

std::string errors_section(const BenchReport& r) {
  std::vector<std::vector<std::string>> rows = {{"load", "kind", "count", "first message"}};
  for (const PointResult& p : r.points)
    for (const auto& [kind, n] : p.errors)
      rows.push_back({load_label(p.mode, p.load), kind, std::to_string(n),
                      p.error_examples.contains(kind) ? p.error_examples.at(kind) : ""});
  if (rows.size() == 1) return "<p>No errors.</p>\n";
  return table(rows);
}

std::string server_section(const BenchReport& r) {
  std::string out;
  for (const PointResult& p : r.points) {
    out += "<h3>" + esc(load_label(p.mode, p.load)) + "</h3>\n";
    if (p.server.empty()) {
      out += "<p>" + esc(p.server_note.empty() ? "No server metrics changed." : p.server_note) + "</p>\n";
      continue;
    }
    std::vector<std::vector<std::string>> rows = {{"metric", "type", "change", "mean", "p50 (bucket est.)", "p99 (bucket est.)"}};
    for (const MetricDelta& d : p.server) {
      if (d.type == "histogram") {
        const bool seconds = d.name.ends_with("_seconds");
        auto value = [&](double v) { return seconds ? format_ms(v) + " ms" : format_number(v); };
        rows.push_back({d.name, d.type, "+" + format_number(d.count) + " observed", value(d.mean().value_or(0)),
                        d.p50 ? value(*d.p50) : "-", d.p99 ? value(*d.p99) : "-"});
      } else if (d.type == "gauge") {
        rows.push_back({d.name, d.type, format_number(d.before) + " -> " + format_number(d.after), "", "", ""});
      } else {
        std::string change = "+" + format_number(d.delta);
        for (const auto& [k, v] : d.series) change += "; " + k + " +" + format_number(v);
        rows.push_back({d.name, d.type, change, "", "", ""});
      }
    }
    out += table(rows);
  }
  return out;
}

std::string card(const std::string& value, const std::string& key) {
  return "<div class=\"card\"><div class=\"v\">" + esc(value) + "</div><div class=\"k\">" + esc(key) + "</div></div>\n";
}

}  // namespace

std::string render_html_report(const BenchReport& r) {
  const std::string workload = r.config.value("workload", nlohmann::json::object()).value("workload", "workload");
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>prism bench: " +
                    esc(workload) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  out += "<h1>prism bench: " + esc(workload) + "</h1>\n<div class=\"sub\">" + esc(r.config.value("url", "")) + " &middot; model " +
         esc(r.config.value("workload", nlohmann::json::object()).value("model", "")) + " &middot; " +
         esc(r.config.value("started_at", "")) + "</div>\n";

  if (!r.points.empty()) {
    // The saturation point's figures when there is one, else the last (highest) level's.
    const size_t key = r.saturation.reached ? static_cast<size_t>(r.saturation.index) : r.points.size() - 1;
    const PointResult& p = r.points[key];
    out += "<div class=\"cards\">\n";
    out += card(format_number(rate_of(p, r.headline_unit)) + " " + unit_rate_label(r.headline_unit),
                (r.saturation.reached ? "at saturation, " : "") + load_label(p.mode, p.load));
    if (auto it = p.latency_s.find("e2e"); it != p.latency_s.end())
      out += card(format_ms(it->second.p99) + " ms", "end-to-end p99");
    if (auto it = p.latency_s.find("ttft"); it != p.latency_s.end())
      out += card(format_ms(it->second.p99) + " ms", "time to first token p99");
    int64_t errors = 0, requests = 0;
    for (const PointResult& q : r.points) errors += q.num_errors(), requests += q.num_requests;
    out += card(std::to_string(errors) + " / " + std::to_string(requests), "errors / requests (all levels)");
    out += "</div>\n";
    if (r.points.size() > 1) out += "<p>Saturation: " + esc(r.saturation.reason) + "</p>\n";
  }

  out += "<h2>Latency against throughput</h2>\n<div class=\"charts\">\n";
  for (const std::string& s : all_series(r)) {
    if (s == "itl" || s == "tpot") continue;  // per-token figures: in the bars below
    out += latency_curve(r, s, s + " latency against throughput");
  }
  out += throughput_curve(r) + "</div>\n";

  out += "<h2>Percentiles</h2>\n<div class=\"charts\">\n";
  for (const std::string& s : all_series(r)) out += percentile_bars(r, s);
  out += "</div>\n";

  out += "<h2>Results</h2>\n" + results_table(r);
  out += "<h2>Errors</h2>\n" + errors_section(r);
  out += "<h2>Server metrics (/metrics after minus before)</h2>\n" + server_section(r);
  out += "<h2>Run configuration</h2>\n<pre>" + esc(r.config.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) +
         "</pre>\n";
  out += "<p class=\"sub\">Percentiles interpolate linearly between closest ranks (NumPy's default). Written by prism "
         "bench.</p>\n</body>\n</html>\n";
  return out;
}

}  // namespace prism::tools::loadgen

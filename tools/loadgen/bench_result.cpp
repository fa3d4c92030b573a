// tools/loadgen/bench_result.cpp: records to figures, saturation, JSON both ways.
#include "tools/loadgen/bench_result.h"

#include "tools/loadgen/text_table.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace prism::tools::loadgen {

namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

nlohmann::json summary_ms(const LatencySummary& s) {
  return {{"count", s.count}, {"mean", s.mean * 1e3}, {"min", s.min * 1e3}, {"p50", s.p50 * 1e3},
          {"p90", s.p90 * 1e3}, {"p99", s.p99 * 1e3}, {"max", s.max * 1e3}};
}

LatencySummary summary_from_ms(const nlohmann::json& j) {
  LatencySummary s;
  s.count = j.at("count").get<int64_t>();
  s.mean = j.at("mean").get<double>() / 1e3;
  s.min = j.at("min").get<double>() / 1e3;
  s.p50 = j.at("p50").get<double>() / 1e3;
  s.p90 = j.at("p90").get<double>() / 1e3;
  s.p99 = j.at("p99").get<double>() / 1e3;
  s.max = j.at("max").get<double>() / 1e3;
  return s;
}

nlohmann::json delta_json(const MetricDelta& d) {
  nlohmann::json j = {{"name", d.name}, {"type", d.type}};
  if (d.type == "histogram") {
    j["count"] = d.count;
    j["sum"] = d.sum;
    if (auto m = d.mean()) j["mean"] = *m;
    if (d.p50) j["p50"] = *d.p50;
    if (d.p99) j["p99"] = *d.p99;
  } else if (d.type == "gauge") {
    j["before"] = d.before;
    j["after"] = d.after;
  } else {
    j["delta"] = d.delta;
    if (!d.series.empty()) {
      nlohmann::json series = nlohmann::json::object();
      for (const auto& [k, v] : d.series) series[k] = v;
      j["series"] = std::move(series);
    }
  }
  return j;
}

MetricDelta delta_from_json(const nlohmann::json& j) {
  MetricDelta d;
  d.name = j.at("name").get<std::string>();
  d.type = j.at("type").get<std::string>();
  d.count = j.value("count", 0.0);
  d.sum = j.value("sum", 0.0);
  if (j.contains("p50")) d.p50 = j["p50"].get<double>();
  if (j.contains("p99")) d.p99 = j["p99"].get<double>();
  d.before = j.value("before", 0.0);
  d.after = j.value("after", 0.0);
  d.delta = j.value("delta", 0.0);
  if (j.contains("series"))
    for (const auto& [k, v] : j["series"].items()) d.series.emplace_back(k, v.get<double>());
  return d;
}

nlohmann::json point_json(const PointResult& p) {
  nlohmann::json latency = nlohmann::json::object();
  for (const auto& [name, s] : p.latency_s) latency[name] = summary_ms(s);
  nlohmann::json server = nlohmann::json::array();
  for (const MetricDelta& d : p.server) server.push_back(delta_json(d));
  nlohmann::json j = {{"mode", mode_name(p.mode)},
                      {"load", p.load},
                      {"requests", p.num_requests},
                      {"ok", p.num_ok},
                      {"errors_total", p.num_errors()},
                      {"warmup_requests", p.num_warmup},
                      {"window_s", p.window_s},
                      {"elapsed_s", p.elapsed_s},
                      {"errors", p.errors},
                      {"error_examples", p.error_examples},
                      {"throughput_per_s", p.throughput_per_s},
                      {"totals", p.totals},
                      {"latency_ms", std::move(latency)},
                      {"server", std::move(server)}};
  if (!p.server_note.empty()) j["server_note"] = p.server_note;
  return j;
}

// Throws nlohmann::json::exception for a missing or mistyped field (report_from_json catches).
Result<PointResult> point_from_json(const nlohmann::json& j) {
  PointResult p;
  const std::string mode = j.at("mode").get<std::string>();
  if (mode != "open" && mode != "closed") return invalid_argument("a point's mode must be open or closed, got '" + mode + "'");
  p.mode = mode == "open" ? LoadMode::open : LoadMode::closed;
  p.load = j.at("load").get<double>();
  p.num_requests = j.at("requests").get<int64_t>();
  p.num_ok = j.at("ok").get<int64_t>();
  p.num_warmup = j.value("warmup_requests", int64_t{0});
  p.window_s = j.at("window_s").get<double>();
  p.elapsed_s = j.value("elapsed_s", 0.0);
  p.errors = j.at("errors").get<std::map<std::string, int64_t>>();
  p.error_examples = j.value("error_examples", std::map<std::string, std::string>{});
  p.throughput_per_s = j.at("throughput_per_s").get<std::map<std::string, double>>();
  p.totals = j.value("totals", std::map<std::string, double>{});
  for (const auto& [name, s] : j.at("latency_ms").items()) p.latency_s[name] = summary_from_ms(s);
  if (j.contains("server"))
    for (const nlohmann::json& d : j["server"]) p.server.push_back(delta_from_json(d));
  p.server_note = j.value("server_note", "");
  return p;
}

double requests_per_s(const PointResult& p) {
  auto it = p.throughput_per_s.find("requests");
  return it == p.throughput_per_s.end() ? 0.0 : it->second;
}

}  // namespace

std::vector<std::string> ordered_series(const std::map<std::string, LatencySummary>& latency) {
  std::vector<std::string> out;
  for (const char* name : {"e2e", "ttft", "itl", "tpot"})
    if (latency.contains(name)) out.emplace_back(name);
  for (const auto& [name, s] : latency)
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

std::vector<std::string> ordered_units(const std::map<std::string, double>& throughput, const std::string& headline) {
  std::vector<std::string> out;
  for (const std::string& name : {std::string("requests"), headline})
    if (throughput.contains(name) && std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  for (const auto& [name, v] : throughput)
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

std::string unit_rate_label(const std::string& unit) {
  if (unit == "requests") return "req/s";
  std::string label = unit;
  std::replace(label.begin(), label.end(), '_', ' ');
  return label + "/s";
}

std::string_view mode_name(LoadMode mode) { return mode == LoadMode::open ? "open" : "closed"; }

std::string load_label(LoadMode mode, double load) {
  if (mode == LoadMode::closed) return "concurrency " + fmt("%g", load);
  return "rate " + fmt("%g", load) + "/s";
}

PointResult summarize_point(const LoadPlan& plan, const LoadRecords& records) {
  PointResult p;
  p.mode = plan.mode;
  p.load = plan.mode == LoadMode::closed ? static_cast<double>(plan.concurrency) : plan.rate_per_s;
  p.num_requests = static_cast<int64_t>(records.measured.size());
  p.num_warmup = records.num_warmup;
  p.elapsed_s = records.elapsed_s;
  std::vector<Interval> intervals;
  std::vector<double> e2e;
  std::map<std::string, double> units;
  std::map<std::string, std::vector<double>> series;
  for (const RequestRecord& r : records.measured) {
    intervals.push_back({r.start_s, r.end_s});
    if (!r.error.empty()) {
      ++p.errors[r.error];
      p.error_examples.emplace(r.error, r.error_detail);  // keeps the first
      continue;
    }
    ++p.num_ok;
    e2e.push_back(r.end_s - r.start_s);
    for (const auto& [unit, v] : r.measurement.units) units[unit] += v;
    for (const auto& [name, samples] : r.measurement.latencies_s) {
      std::vector<double>& all = series[name];
      all.insert(all.end(), samples.begin(), samples.end());
    }
  }
  p.window_s = measurement_window(intervals).length_s();
  p.throughput_per_s["requests"] = rate_per_s(static_cast<double>(p.num_ok), p.window_s);
  p.totals = units;
  p.totals["requests"] = static_cast<double>(p.num_ok);
  for (const auto& [unit, total] : units) p.throughput_per_s[unit] = rate_per_s(total, p.window_s);
  if (!e2e.empty()) p.latency_s["e2e"] = summarize(std::move(e2e));
  for (auto& [name, samples] : series) p.latency_s[name] = summarize(std::move(samples));
  return p;
}

Saturation find_saturation(const std::vector<PointResult>& points) {
  Saturation s;
  if (points.empty()) return s;
  std::vector<int> order(points.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return points[a].load < points[b].load; });
  if (points[order[0]].mode == LoadMode::open) {
    for (size_t k = 0; k < order.size(); ++k) {
      const PointResult& p = points[order[k]];
      const double achieved = requests_per_s(p);
      if (achieved >= 0.9 * p.load && p.error_rate() <= 0.05) continue;
      s.reached = true;
      s.index = order[k == 0 ? 0 : k - 1];
      s.reason = "at " + fmt("%g", p.load) + "/s offered the server achieved " + format_number(achieved) + "/s with " +
                 fmt("%.1f", 100 * p.error_rate()) + "% errors";
      s.reason = k == 0 ? "the server fell behind at the lowest rate: " + s.reason
                        : "sustains " + fmt("%g", points[s.index].load) + "/s; " + s.reason;
      return s;
    }
    s.index = order.back();
    s.reason = "not reached: the server kept up with every rate up to " + fmt("%g", points[s.index].load) + "/s";
    return s;
  }
  double best = 0;
  for (const PointResult& p : points) best = std::max(best, requests_per_s(p));
  for (int i : order) {
    if (requests_per_s(points[i]) >= 0.9 * best) {
      s.index = i;
      break;
    }
  }
  const PointResult& sat = points[s.index];
  s.reached = true;
  s.reason = "throughput reaches " + format_number(requests_per_s(sat)) + " req/s (90% or more of the best, " +
             format_number(best) + ") at concurrency " + fmt("%g", sat.load);
  if (order.size() < 2) {
    s.reached = false;
    s.reason = "one load level: sweep concurrencies to find it";
  } else if (s.index == order.back()) {
    const double before = requests_per_s(points[order[order.size() - 2]]);
    if (requests_per_s(sat) >= 1.1 * before) {
      s.reached = false;
      s.reason = "not reached: throughput still grew " + fmt("%.0f", 100 * (requests_per_s(sat) / std::max(before, 1e-12) - 1)) +
                 "% at the last step (concurrency " + fmt("%g", sat.load) + ")";
    }
  }
  return s;
}

nlohmann::json to_json(const BenchReport& report) {
  nlohmann::json points = nlohmann::json::array();
  for (const PointResult& p : report.points) points.push_back(point_json(p));
  return {{"prism_bench_report", kReportFormatVersion},
          {"config", report.config},
          {"headline_unit", report.headline_unit},
          {"points", std::move(points)},
          {"saturation", {{"reached", report.saturation.reached}, {"index", report.saturation.index},
                          {"reason", report.saturation.reason}}}};
}

Result<BenchReport> report_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("prism_bench_report"))
    return invalid_argument("not a prism bench report (no 'prism_bench_report' field): write one with --json");
  try {
    if (j.at("prism_bench_report").get<int>() != kReportFormatVersion)
      return invalid_argument("report format " + j["prism_bench_report"].dump() + " is not the one this prism reads (" +
                              std::to_string(kReportFormatVersion) + ")");
    BenchReport r;
    r.config = j.at("config");
    r.headline_unit = j.value("headline_unit", "requests");
    for (const nlohmann::json& p : j.at("points")) {
      PRISM_ASSIGN_OR_RETURN(PointResult point, point_from_json(p));
      r.points.push_back(std::move(point));
    }
    if (j.contains("saturation")) {
      const nlohmann::json& s = j["saturation"];
      r.saturation.reached = s.value("reached", false);
      r.saturation.index = s.value("index", -1);
      r.saturation.reason = s.value("reason", "");
      if (r.saturation.index >= static_cast<int>(r.points.size())) r.saturation.index = -1;
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("malformed prism bench report: ") + e.what());
  }
}

}  // namespace prism::tools::loadgen

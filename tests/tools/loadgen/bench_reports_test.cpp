// prism bench's outputs from a synthetic sweep: JSON that reads back, the HTML report's
// structure (balanced tags, its charts, nothing fetched from the network), --compare, the
// terminal summary and axis ticks.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

#include "tools/loadgen/compare_report.h"
#include "tools/loadgen/html_report.h"
#include "tools/loadgen/svg_chart.h"
#include "tools/loadgen/terminal_report.h"

namespace prism::tools::loadgen {
namespace {

LatencySummary latency(double p50_s) {
  LatencySummary s;
  s.count = 100;
  s.min = p50_s / 2;
  s.mean = p50_s * 1.1;
  s.p50 = p50_s;
  s.p90 = p50_s * 1.5;
  s.p99 = p50_s * 2;
  s.max = p50_s * 3;
  return s;
}

PointResult point(double concurrency, double req_per_s, double e2e_s, int64_t errors = 0) {
  PointResult p;
  p.mode = LoadMode::closed;
  p.load = concurrency;
  p.num_requests = 100;
  p.num_ok = 100 - errors;
  p.window_s = 100 / req_per_s;
  p.throughput_per_s = {{"requests", req_per_s}, {"output_tokens", req_per_s * 50}, {"input_tokens", req_per_s * 200}};
  p.latency_s = {{"e2e", latency(e2e_s)}, {"ttft", latency(e2e_s / 10)}, {"itl", latency(0.01)}, {"tpot", latency(0.012)}};
  if (errors > 0) {
    p.errors["http_500"] = errors;
    p.error_examples["http_500"] = "boom <b>";
  }
  MetricDelta queue;
  queue.name = "prism_queue_seconds";
  queue.type = "histogram";
  queue.count = 100;
  queue.sum = 0.5 * concurrency;
  queue.p50 = 0.004;
  queue.p99 = 0.02;
  p.server.push_back(queue);
  MetricDelta requests;
  requests.name = "prism_requests_total";
  requests.type = "counter";
  requests.delta = 100;
  p.server.push_back(requests);
  return p;
}

BenchReport sweep_report(double scale = 1) {
  BenchReport r;
  r.config = {{"url", "http://127.0.0.1:8080"},
              {"workload", {{"workload", "chat"}, {"model", "demo-chat"}, {"input_tokens", "128-1024"}}},
              {"mode", "closed"},
              {"seed", 0},
              {"sweep", {1, 2, 4, 8}}};
  r.headline_unit = "output_tokens";
  r.points = {point(1, 10 * scale, 0.1), point(2, 19 * scale, 0.105), point(4, 30 * scale, 0.13, 3),
              point(8, 31 * scale, 0.25)};
  r.saturation = find_saturation(r.points);
  return r;
}

TEST(BenchJson, RoundTrips) {
  const BenchReport r = sweep_report();
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["prism_bench_report"], kReportFormatVersion);
  EXPECT_NEAR(j["points"][0]["latency_ms"]["e2e"]["p50"].get<double>(), 100, 1e-9);  // milliseconds
  Result<BenchReport> back = report_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.has_value()) << back.status().to_string();
  ASSERT_EQ(back->points.size(), 4u);
  EXPECT_EQ(back->headline_unit, "output_tokens");
  EXPECT_EQ(back->saturation.index, r.saturation.index);
  EXPECT_EQ(back->saturation.reason, r.saturation.reason);
  const PointResult& p = back->points[2];
  EXPECT_EQ(p.load, 4);
  EXPECT_EQ(p.num_errors(), 3);
  EXPECT_EQ(p.errors.at("http_500"), 3);
  EXPECT_NEAR(p.latency_s.at("ttft").p99, 0.026, 1e-12);
  EXPECT_DOUBLE_EQ(p.throughput_per_s.at("output_tokens"), 1500);
  ASSERT_EQ(p.server.size(), 2u);
  EXPECT_NEAR(*p.server[0].mean(), 0.02, 1e-12);
  EXPECT_EQ(to_json(*back), j);

  EXPECT_FALSE(report_from_json(nlohmann::json::object()).has_value());
  nlohmann::json broken = j;
  broken["points"][0].erase("latency_ms");
  Result<BenchReport> b = report_from_json(broken);
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.status().message().find("latency_ms"), std::string::npos);
  broken = j;
  broken["points"][0]["mode"] = "sideways";
  EXPECT_FALSE(report_from_json(broken).has_value());
}

// Every element closes in order (void elements aside); returns the first problem or "".
std::string check_tags(const std::string& html) {
  static const std::regex tag(R"(<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*?)(/?)>)");
  const std::set<std::string> void_elements = {"meta", "br", "hr", "img", "link", "input"};
  std::vector<std::string> open;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[2];
    if ((*it)[1] == "/") {
      if (open.empty() || open.back() != name) return "unexpected </" + name + "> (open: " + (open.empty() ? "none" : open.back()) + ")";
      open.pop_back();
    } else if ((*it)[4] != "/" && !void_elements.contains(name)) {
      open.push_back(name);
    }
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

TEST(HtmlReport, SelfContainedWithItsCharts) {
  const BenchReport r = sweep_report();
  const std::string html = render_html_report(r);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_EQ(check_tags(html), "");
  // Nothing from the network: no script, stylesheet link, image, import or url().
  for (const char* banned : {"<script", "<link", "<img", "src=", "href=", "@import", "url("})
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
  // Latency-against-throughput curves for e2e and ttft, throughput against load, percentile
  // bars for the four series.
  EXPECT_EQ(count(html, "<svg"), 3u + 4u);
  EXPECT_EQ(count(html, "</svg>"), count(html, "<svg"));
  EXPECT_NE(html.find("e2e latency against throughput"), std::string::npos);
  EXPECT_NE(html.find("ttft latency against throughput"), std::string::npos);
  EXPECT_NE(html.find("Throughput against load"), std::string::npos);
  EXPECT_NE(html.find("tpot percentiles (ms)"), std::string::npos);
  // 3 percentile lines on each of 2 latency charts + 1 throughput line; a dot per level each.
  EXPECT_EQ(count(html, "<polyline"), 7u);
  EXPECT_EQ(count(html, "<circle"), 7u * 4u);
  EXPECT_EQ(count(html, "<rect class=\"bar\""), 4u * 4u * 3u);
  EXPECT_EQ(count(html, "class=\"marker\""), 3u);  // the saturation line on every curve
  // Polyline points are inside the SVG's box.
  static const std::regex pts(R"re(points="([^"]*)")re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), pts); it != std::sregex_iterator(); ++it) {
    std::istringstream in((*it)[1].str());
    std::string xy;
    while (in >> xy) {
      const double x = std::stod(xy.substr(0, xy.find(','))), y = std::stod(xy.substr(xy.find(',') + 1));
      EXPECT_GE(x, 0);
      EXPECT_LE(x, 640);
      EXPECT_GE(y, 0);
      EXPECT_LE(y, 360);
    }
  }
  // User text is escaped, the config is shown.
  EXPECT_NE(html.find("boom &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("boom <b>"), std::string::npos);
  EXPECT_NE(html.find("&quot;input_tokens&quot;: &quot;128-1024&quot;"), std::string::npos);
  EXPECT_NE(html.find("prism_queue_seconds"), std::string::npos);
}

TEST(HtmlReport, OneLevelAndNoDataStillRender) {
  BenchReport r = sweep_report();
  r.points.resize(1);
  r.saturation = find_saturation(r.points);
  std::string html = render_html_report(r);
  EXPECT_EQ(check_tags(html), "");
  EXPECT_EQ(count(html, "<circle"), 7u);
  r.points[0].latency_s.clear();
  html = render_html_report(r);
  EXPECT_EQ(check_tags(html), "");
  r.points.clear();
  r.saturation = find_saturation(r.points);
  html = render_html_report(r);
  EXPECT_EQ(check_tags(html), "");
}

TEST(Compare, SideBySideWithRatios) {
  const BenchReport a = sweep_report(1), b = sweep_report(2);
  const std::string out = format_comparison(a, b, "a.json", "b.json");
  EXPECT_NE(out.find("a: a.json: chat on http://127.0.0.1:8080 (model demo-chat)"), std::string::npos) << out;
  EXPECT_EQ(count(out, "concurrency "), 4u + 2u) << out;  // four levels (+ the two saturation lines)
  // req/s doubled; latencies equal.
  static const std::regex req(R"(req/s\s+10\s+20\s+x2\.00)");
  EXPECT_TRUE(std::regex_search(out, req)) << out;
  static const std::regex p99(R"(e2e p99 ms\s+200\s+200\s+x1\.00)");
  EXPECT_TRUE(std::regex_search(out, p99)) << out;
  EXPECT_NE(out.find("prism_queue_seconds mean ms"), std::string::npos) << out;
  EXPECT_NE(out.find("saturation:"), std::string::npos);

  BenchReport c = sweep_report();
  c.points.pop_back();  // a level only a has
  const std::string partial = format_comparison(a, c, "a", "c");
  EXPECT_NE(partial.find("only in a: concurrency 8"), std::string::npos) << partial;
}

TEST(TerminalSummary, SweepTableAndSaturation) {
  const BenchReport r = sweep_report();
  const std::string out = format_report_summary(r);
  EXPECT_NE(out.find("concurrency 4: 100 requests (97 ok, 3 errors)"), std::string::npos) << out;
  EXPECT_NE(out.find("http_500 3 (boom <b>)"), std::string::npos) << out;
  EXPECT_NE(out.find("prism_queue_seconds: 100 observed, mean 5 ms"), std::string::npos) << out;
  EXPECT_NE(out.find("concurrency 4 *"), std::string::npos) << out;  // the saturation point
  EXPECT_NE(out.find("saturation (*): throughput reaches 30 req/s"), std::string::npos) << out;
  static const std::regex row(R"(ttft\s+10\s+15\s+20\s+11\s+30\s+100)");  // concurrency 1, ms
  EXPECT_TRUE(std::regex_search(out, row)) << out;
}

TEST(SvgChart, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 7.3, 5), (std::vector<double>{0, 2, 4, 6, 8}));
  const std::vector<double> unit = nice_ticks(0, 1, 5);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * static_cast<double>(i), 1e-12);
  EXPECT_EQ(nice_ticks(3, 17, 5), (std::vector<double>{5, 10, 15, 20}));
  EXPECT_EQ(nice_ticks(0, 950, 6).back(), 1000);
  EXPECT_EQ(nice_ticks(0, 0, 5), (std::vector<double>{0}));
  EXPECT_EQ(xml_escape("a<b & \"c\">'"), "a&lt;b &amp; &quot;c&quot;&gt;&#39;");
}

}  // namespace
}  // namespace prism::tools::loadgen

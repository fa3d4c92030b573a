// The metrics registry: exact Prometheus 0.0.4 text for a small registry, escaping, number
// formatting, and concurrent updates adding up.
#include "serving/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace prism::serving {
namespace {

TEST(Metrics, ExpositionTextExact) {
  MetricsRegistry m;
  m.counter("prism_requests_total", "Requests by final status.", {{"deployment", "a"}, {"status", "ok"}}).inc(3);
  m.counter("prism_requests_total", "ignored: the first help wins", {{"deployment", "a"}, {"status", "cancelled"}})
      .inc();
  m.gauge("prism_queue_depth", "Waiting requests.", {{"deployment", "a"}}).set(7);
  const double bounds[] = {0.1, 1, 2.5};
  Histogram& h = m.histogram("prism_request_seconds", "Request latency.", bounds, {{"deployment", "a"}});
  h.observe(0.05);
  h.observe(0.1);  // on a bound: that bucket (le)
  h.observe(2);
  h.observe(100);
  m.gauge_callback("prism_fixed", "A computed gauge.", {}, [] { return 42.0; });

  const std::string want =
      "# HELP prism_fixed A computed gauge.\n"
      "# TYPE prism_fixed gauge\n"
      "prism_fixed 42\n"
      "# HELP prism_queue_depth Waiting requests.\n"
      "# TYPE prism_queue_depth gauge\n"
      "prism_queue_depth{deployment=\"a\"} 7\n"
      "# HELP prism_request_seconds Request latency.\n"
      "# TYPE prism_request_seconds histogram\n"
      "prism_request_seconds_bucket{deployment=\"a\",le=\"0.1\"} 2\n"
      "prism_request_seconds_bucket{deployment=\"a\",le=\"1\"} 2\n"
      "prism_request_seconds_bucket{deployment=\"a\",le=\"2.5\"} 3\n"
      "prism_request_seconds_bucket{deployment=\"a\",le=\"+Inf\"} 4\n"
      "prism_request_seconds_sum{deployment=\"a\"} 102.15\n"
      "prism_request_seconds_count{deployment=\"a\"} 4\n"
      "# HELP prism_requests_total Requests by final status.\n"
      "# TYPE prism_requests_total counter\n"
      "prism_requests_total{deployment=\"a\",status=\"cancelled\"} 1\n"
      "prism_requests_total{deployment=\"a\",status=\"ok\"} 3\n";
  EXPECT_EQ(m.render(), want);
}

TEST(Metrics, EscapingAndNumbers) {
  MetricsRegistry m;
  m.gauge("g", "Help with \\ and\nnewline.", {{"l", "a\"b\\c\nd"}}).set(-0.25);
  EXPECT_EQ(m.render(),
            "# HELP g Help with \\\\ and\\nnewline.\n"
            "# TYPE g gauge\n"
            "g{l=\"a\\\"b\\\\c\\nd\"} -0.25\n");
  EXPECT_EQ(format_metric_value(0), "0");
  EXPECT_EQ(format_metric_value(1000000), "1000000");
  EXPECT_EQ(format_metric_value(0.0005), "0.0005");
  EXPECT_EQ(format_metric_value(1e20), "1e+20");
  EXPECT_EQ(format_metric_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_metric_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_metric_value(0.0 / 0.0), "NaN");
}

TEST(Metrics, SameSeriesSameObject) {
  MetricsRegistry m;
  Counter& a = m.counter("c", "h", {{"x", "1"}});
  Counter& b = m.counter("c", "h", {{"x", "1"}});
  Counter& c = m.counter("c", "h", {{"x", "2"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
}

TEST(Metrics, ConcurrentUpdatesAddUp) {
  MetricsRegistry m;
  Counter& c = m.counter("c", "h");
  const double bounds[] = {1, 10};
  Histogram& h = m.histogram("h", "h", bounds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(i % 20);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000.0);
  EXPECT_EQ(h.count(), 40000u);
  std::vector<uint64_t> b = h.bucket_counts();
  EXPECT_EQ(b[0], 4u * 500 * 2);  // 0 and 1 of every 20
  EXPECT_EQ(b[1], 4u * 500 * 9);  // 2..10
  EXPECT_EQ(b[2], 4u * 500 * 9);  // 11..19
  EXPECT_EQ(h.sum(), 4.0 * 500 * 190);
}

TEST(Metrics, ProcessMemoryIsPositive) {
  MetricsRegistry m;
  register_process_metrics(m);
  std::string text = m.render();
  const std::string key = "\nprism_process_resident_memory_bytes ";
  size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_GT(std::stod(text.substr(at + key.size())), 1e5);
}

}  // namespace
}  // namespace prism::serving

// The timing math of prism bench on synthetic timestamps: percentiles, summaries, windows and
// rates, arrival schedules, run phases, length mixes, point summaries and saturation.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tools/loadgen/arrival_schedule.h"
#include "tools/loadgen/bench_result.h"
#include "tools/loadgen/latency_stats.h"
#include "tools/loadgen/length_distribution.h"
#include "tools/loadgen/load_runner.h"
#include "tools/loadgen/rng.h"

namespace prism::tools::loadgen {
namespace {

TEST(Percentile, InterpolatesLinearlyBetweenClosestRanks) {
  const std::vector<double> x = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(*percentile_sorted(x, 0), 1);
  EXPECT_DOUBLE_EQ(*percentile_sorted(x, 50), 2.5);   // h = 1.5
  EXPECT_DOUBLE_EQ(*percentile_sorted(x, 90), 3.7);   // h = 2.7
  EXPECT_DOUBLE_EQ(*percentile_sorted(x, 99), 3.97);  // h = 2.97
  EXPECT_DOUBLE_EQ(*percentile_sorted(x, 100), 4);
  // numpy.percentile([15, 20, 35, 40, 50], 40) == 29.0
  const std::vector<double> y = {15, 20, 35, 40, 50};
  EXPECT_DOUBLE_EQ(*percentile_sorted(y, 40), 29);
}

TEST(Percentile, EdgeCases) {
  EXPECT_FALSE(percentile_sorted({}, 50).has_value());
  const std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(*percentile_sorted(one, 0), 7);
  EXPECT_DOUBLE_EQ(*percentile_sorted(one, 99), 7);
  const std::vector<double> two = {0, 10};
  EXPECT_DOUBLE_EQ(*percentile_sorted(two, 150), 10);  // clamped
  EXPECT_DOUBLE_EQ(*percentile_sorted(two, -5), 0);
}

TEST(Summarize, SortsAndSummarizes) {
  // 100 samples 1..100 shuffled: p50 = 50.5, p90 = 90.1, p99 = 99.01.
  std::vector<double> s;
  for (int i = 0; i < 100; ++i) s.push_back(static_cast<double>((i * 37) % 100 + 1));
  const LatencySummary sum = summarize(s);
  EXPECT_EQ(sum.count, 100);
  EXPECT_DOUBLE_EQ(sum.min, 1);
  EXPECT_DOUBLE_EQ(sum.max, 100);
  EXPECT_DOUBLE_EQ(sum.mean, 50.5);
  EXPECT_DOUBLE_EQ(sum.p50, 50.5);
  EXPECT_NEAR(sum.p90, 90.1, 1e-12);
  EXPECT_NEAR(sum.p99, 99.01, 1e-12);
  EXPECT_EQ(summarize({}).count, 0);
}

TEST(Window, SpansFirstStartToLastEnd) {
  const std::vector<Interval> r = {{1.0, 1.5}, {0.5, 0.7}, {2.0, 4.25}, {3.0, 3.1}};
  const Window w = measurement_window(r);
  EXPECT_DOUBLE_EQ(w.start_s, 0.5);
  EXPECT_DOUBLE_EQ(w.end_s, 4.25);
  EXPECT_DOUBLE_EQ(w.length_s(), 3.75);
  EXPECT_DOUBLE_EQ(measurement_window({}).length_s(), 0);
  EXPECT_DOUBLE_EQ(rate_per_s(30, 3.75), 8);
  EXPECT_DOUBLE_EQ(rate_per_s(30, 0), 0);
}

TEST(Rng, SameSeedSameStreamAndTransformsAreOurs) {
  Rng a = Rng::derive(42, kRequestStream, 7), b = Rng::derive(42, kRequestStream, 7);
  Rng c = Rng::derive(42, kRequestStream, 8), d = Rng::derive(43, kRequestStream, 7);
  const uint64_t va = a.next_u64();
  EXPECT_EQ(va, b.next_u64());
  EXPECT_NE(va, c.next_u64());
  EXPECT_NE(va, d.next_u64());
  // std::mt19937_64 is specified bit for bit: its 10000th output from the default seed.
  std::mt19937_64 ref;
  ref.discard(9999);
  EXPECT_EQ(ref(), 9981545732273789042ull);
  Rng u(1);
  for (int i = 0; i < 1000; ++i) {
    const double x = u.uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    const int64_t k = u.uniform_int(3, 5);
    ASSERT_GE(k, 3);
    ASSERT_LE(k, 5);
  }
}

TEST(ArrivalSchedule, PoissonIsDeterministicWithTheRightMean) {
  ArrivalSchedule a(Arrival::poisson, 10, 123), b(Arrival::poisson, 10, 123), c(Arrival::poisson, 10, 124);
  std::vector<double> ta, tb, tc;
  for (int i = 0; i < 20000; ++i) {
    ta.push_back(a.next_s());
    tb.push_back(b.next_s());
    tc.push_back(c.next_s());
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  EXPECT_DOUBLE_EQ(ta[0], 0);
  for (size_t i = 1; i < ta.size(); ++i) ASSERT_GT(ta[i], ta[i - 1]);
  // Mean gap 1 / rate; the gaps' standard deviation equals their mean for a Poisson process.
  const double mean_gap = ta.back() / static_cast<double>(ta.size() - 1);
  EXPECT_NEAR(mean_gap, 0.1, 0.1 * 0.03);
  double var = 0;
  for (size_t i = 1; i < ta.size(); ++i) var += std::pow(ta[i] - ta[i - 1] - mean_gap, 2);
  EXPECT_NEAR(std::sqrt(var / static_cast<double>(ta.size() - 2)), 0.1, 0.1 * 0.05);
}

TEST(ArrivalSchedule, ConstantIsExact) {
  ArrivalSchedule s(Arrival::constant, 4, 0);
  for (int i = 0; i < 10; ++i) EXPECT_DOUBLE_EQ(s.next_s(), i / 4.0);
  EXPECT_TRUE(parse_arrival("poisson").has_value());
  EXPECT_FALSE(parse_arrival("bursty").has_value());
}

TEST(RequestPhase, WarmupThenDurationOrCount) {
  LoadPlan by_time;
  by_time.warmup_s = 2;
  by_time.duration_s = 10;
  EXPECT_EQ(request_phase(by_time, 0, 0), RequestPhase::warmup);
  EXPECT_EQ(request_phase(by_time, 1.99, 0), RequestPhase::warmup);
  EXPECT_EQ(request_phase(by_time, 2, 0), RequestPhase::measured);
  EXPECT_EQ(request_phase(by_time, 11.99, 1000), RequestPhase::measured);
  EXPECT_EQ(request_phase(by_time, 12, 0), RequestPhase::stop);
  LoadPlan by_count;
  by_count.num_requests = 5;
  EXPECT_EQ(request_phase(by_count, 0, 0), RequestPhase::measured);
  EXPECT_EQ(request_phase(by_count, 100, 4), RequestPhase::measured);
  EXPECT_EQ(request_phase(by_count, 0, 5), RequestPhase::stop);
}

TEST(LengthDistribution, ParsesMixesAndSamplesInside) {
  Result<LengthDistribution> d = LengthDistribution::parse("16-256@95,512@5", "--doc-tokens");
  ASSERT_TRUE(d.has_value()) << d.status().to_string();
  EXPECT_NEAR(d->mean(), 0.95 * 136 + 0.05 * 512, 1e-9);
  EXPECT_EQ(d->max(), 512);
  Rng rng(5);
  int long_docs = 0;
  for (int i = 0; i < 10000; ++i) {
    const int64_t n = d->sample(rng);
    ASSERT_TRUE((n >= 16 && n <= 256) || n == 512) << n;
    long_docs += n == 512;
  }
  EXPECT_NEAR(long_docs / 10000.0, 0.05, 0.01);
  EXPECT_EQ(LengthDistribution::parse("128", "x")->max(), 128);
  EXPECT_DOUBLE_EQ(LengthDistribution::parse("10-20", "x")->mean(), 15);
  for (const char* bad : {"", "0", "5-3", "abc", "10@-1", "10@", "1-2-3", "2000000", "10,", "-5"}) {
    Result<LengthDistribution> r = LengthDistribution::parse(bad, "--input-tokens");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.status().message().find("--input-tokens"), std::string::npos);
  }
}

RequestRecord record(double start, double end, const std::string& error = "", double docs = 0) {
  RequestRecord r;
  r.start_s = start;
  r.end_s = end;
  r.error = error;
  if (!error.empty()) r.error_detail = "detail of " + error;
  if (docs > 0) r.measurement.units["docs"] = docs;
  return r;
}

TEST(SummarizePoint, RatesOverTheWindowAndErrorsByKind) {
  LoadPlan plan;
  plan.mode = LoadMode::closed;
  plan.concurrency = 2;
  LoadRecords records;
  records.measured = {record(0, 0.2, "", 64), record(0.5, 0.9, "", 64), record(1.0, 1.3, "", 64),
                      record(1.5, 2.0, "http_500"), record(1.6, 1.7, "http_500"), record(1.8, 1.9, "timeout")};
  records.measured[0].measurement.latencies_s["ttft"] = {0.05};
  records.measured[1].measurement.latencies_s["ttft"] = {0.15};
  records.num_warmup = 3;
  const PointResult p = summarize_point(plan, records);
  EXPECT_EQ(p.load, 2);
  EXPECT_EQ(p.num_requests, 6);
  EXPECT_EQ(p.num_ok, 3);
  EXPECT_EQ(p.num_errors(), 3);
  EXPECT_EQ(p.num_warmup, 3);
  EXPECT_DOUBLE_EQ(p.window_s, 2.0);
  EXPECT_DOUBLE_EQ(p.throughput_per_s.at("requests"), 1.5);
  EXPECT_DOUBLE_EQ(p.throughput_per_s.at("docs"), 96);
  EXPECT_EQ(p.errors.at("http_500"), 2);
  EXPECT_EQ(p.errors.at("timeout"), 1);
  EXPECT_EQ(p.error_examples.at("timeout"), "detail of timeout");
  EXPECT_EQ(p.latency_s.at("e2e").count, 3);  // successes only
  EXPECT_DOUBLE_EQ(p.latency_s.at("e2e").p50, 0.3);
  EXPECT_DOUBLE_EQ(p.latency_s.at("ttft").p50, 0.1);
  EXPECT_DOUBLE_EQ(p.error_rate(), 0.5);
}

PointResult level(LoadMode mode, double load, double req_per_s, double error_rate = 0) {
  PointResult p;
  p.mode = mode;
  p.load = load;
  p.num_requests = 100;
  p.num_ok = 100 - static_cast<int64_t>(error_rate * 100);
  p.throughput_per_s["requests"] = req_per_s;
  return p;
}

TEST(Saturation, ClosedLoopIsWhereThroughputStopsGrowing) {
  const std::vector<PointResult> sweep = {level(LoadMode::closed, 1, 10), level(LoadMode::closed, 2, 19),
                                          level(LoadMode::closed, 4, 30), level(LoadMode::closed, 8, 31),
                                          level(LoadMode::closed, 16, 30.5)};
  const Saturation s = find_saturation(sweep);
  EXPECT_TRUE(s.reached);
  EXPECT_EQ(s.index, 2);  // 30 >= 0.9 * 31
  const Saturation growing = find_saturation({level(LoadMode::closed, 1, 10), level(LoadMode::closed, 2, 20)});
  EXPECT_FALSE(growing.reached);
  EXPECT_EQ(growing.index, 1);
  EXPECT_FALSE(find_saturation({level(LoadMode::closed, 4, 10)}).reached);
  EXPECT_EQ(find_saturation({}).index, -1);
}

TEST(Saturation, OpenLoopIsTheLastRateTheServerSustains) {
  const Saturation s = find_saturation({level(LoadMode::open, 5, 5), level(LoadMode::open, 10, 9.8),
                                        level(LoadMode::open, 20, 19.5), level(LoadMode::open, 40, 25)});
  EXPECT_TRUE(s.reached);
  EXPECT_EQ(s.index, 2);
  // Errors also mark the server as fallen behind.
  const Saturation errors = find_saturation({level(LoadMode::open, 5, 5), level(LoadMode::open, 10, 9.5, 0.2)});
  EXPECT_EQ(errors.index, 0);
  const Saturation kept_up = find_saturation({level(LoadMode::open, 5, 5), level(LoadMode::open, 10, 10)});
  EXPECT_FALSE(kept_up.reached);
  EXPECT_EQ(kept_up.index, 1);
  // Sweep order does not matter.
  const Saturation unsorted = find_saturation({level(LoadMode::open, 40, 25), level(LoadMode::open, 5, 5),
                                               level(LoadMode::open, 20, 19.5)});
  EXPECT_EQ(unsorted.index, 2);
}

}  // namespace
}  // namespace prism::tools::loadgen

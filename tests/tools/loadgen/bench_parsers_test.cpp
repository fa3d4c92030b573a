// What prism bench reads: event streams (SSE), Prometheus text and its deltas, URLs, and the
// workloads' requests and meters (chat streams, embeddings bodies), all on synthetic input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tools/loadgen/chat_workloads.h"
#include "tools/loadgen/http_client.h"
#include "tools/loadgen/prometheus_text.h"
#include "tools/loadgen/sse_parser.h"
#include "tools/loadgen/workload.h"

namespace prism::tools::loadgen {
namespace {

TEST(SseParser, EventsSplitAnywhere) {
  const std::string stream =
      ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: delta\ndata: line one\ndata:line two\n\ndata: [DONE]\n\n";
  // Byte by byte gives the same events as all at once.
  SseParser whole, bytes;
  std::vector<SseEvent> a = whole.feed(stream), b;
  for (char c : stream)
    for (SseEvent& e : bytes.feed(std::string_view(&c, 1))) b.push_back(std::move(e));
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(a[0].data, "{\"a\":1}");
  EXPECT_EQ(a[1].event, "delta");
  EXPECT_EQ(a[1].data, "line one\nline two");
  EXPECT_EQ(a[2].data, "[DONE]");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i].data, b[i].data);
    EXPECT_EQ(a[i].event, b[i].event);
  }
  EXPECT_FALSE(whole.has_partial_event());
}

TEST(SseParser, CrLineEndsAndCutStreams) {
  SseParser p;
  std::vector<SseEvent> e = p.feed("data: x\r");
  EXPECT_TRUE(e.empty());
  e = p.feed("\n\r\n");  // the LF completes the CRLF; then a blank line
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].data, "x");
  e = p.feed("data: a\rdata: b\r\r");  // bare CRs
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].data, "a\nb");
  EXPECT_TRUE(p.feed("event: only\n\n").empty());  // no data: not dispatched
  p.feed("data: cut");
  EXPECT_TRUE(p.has_partial_event());
}

constexpr const char* kBefore = R"(# HELP prism_queue_seconds Time a request waited in its deployment's queue.
# TYPE prism_queue_seconds histogram
prism_queue_seconds_bucket{deployment="echo",le="0.001"} 3
prism_queue_seconds_bucket{deployment="echo",le="0.01"} 5
prism_queue_seconds_bucket{deployment="echo",le="+Inf"} 6
prism_queue_seconds_sum{deployment="echo"} 0.05
prism_queue_seconds_count{deployment="echo"} 6
prism_queue_seconds_bucket{deployment="other",le="0.001"} 100
prism_queue_seconds_bucket{deployment="other",le="0.01"} 100
prism_queue_seconds_bucket{deployment="other",le="+Inf"} 100
prism_queue_seconds_sum{deployment="other"} 0.01
prism_queue_seconds_count{deployment="other"} 100
# HELP prism_requests_total Requests by final status.
# TYPE prism_requests_total counter
prism_requests_total{deployment="echo",status="ok"} 10
prism_requests_total{deployment="other",status="ok"} 4
# TYPE prism_queue_depth gauge
prism_queue_depth{deployment="echo"} 0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="echo"} 7 1712345678000
)";

constexpr const char* kAfter = R"(# TYPE prism_queue_seconds histogram
prism_queue_seconds_bucket{deployment="echo",le="0.001"} 13
prism_queue_seconds_bucket{deployment="echo",le="0.01"} 25
prism_queue_seconds_bucket{deployment="echo",le="+Inf"} 26
prism_queue_seconds_sum{deployment="echo"} 0.15
prism_queue_seconds_count{deployment="echo"} 26
prism_queue_seconds_bucket{deployment="other",le="0.001"} 200
prism_queue_seconds_bucket{deployment="other",le="0.01"} 200
prism_queue_seconds_bucket{deployment="other",le="+Inf"} 200
prism_queue_seconds_sum{deployment="other"} 0.02
prism_queue_seconds_count{deployment="other"} 200
# TYPE prism_requests_total counter
prism_requests_total{deployment="echo",status="ok"} 28
prism_requests_total{deployment="echo",status="error"} 2
prism_requests_total{deployment="other",status="ok"} 104
# TYPE prism_queue_depth gauge
prism_queue_depth{deployment="echo"} 3
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="echo"} 19
# EOF
)";

const MetricDelta* find(const std::vector<MetricDelta>& d, const std::string& name) {
  for (const MetricDelta& m : d)
    if (m.name == name) return &m;
  return nullptr;
}

TEST(PrometheusText, ParsesSamplesLabelsAndValues) {
  Result<MetricsSnapshot> m = parse_prometheus_text(
      "# TYPE x counter\nx{a=\"q\\\"uote\",b=\"back\\\\slash\"} 1.5e3\ny +Inf\nz{} NaN\n\n  w 2 123\n");
  ASSERT_TRUE(m.has_value()) << m.status().to_string();
  ASSERT_EQ(m->samples.size(), 4u);
  EXPECT_EQ(m->types.at("x"), "counter");
  EXPECT_EQ(m->samples[0].labels[0].second, "q\"uote");
  EXPECT_EQ(m->samples[0].labels[1].second, "back\\slash");
  EXPECT_DOUBLE_EQ(m->samples[0].value, 1500);
  EXPECT_TRUE(std::isinf(m->samples[1].value));
  EXPECT_TRUE(std::isnan(m->samples[2].value));
  EXPECT_DOUBLE_EQ(m->samples[3].value, 2);  // the timestamp is ignored
  Result<MetricsSnapshot> bad = parse_prometheus_text("ok 1\nnot a sample\n");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(parse_prometheus_text("x{a=\"unterminated} 1\n").has_value());
}

TEST(PrometheusText, DeltasForOneModel) {
  Result<MetricsSnapshot> before = parse_prometheus_text(kBefore), after = parse_prometheus_text(kAfter);
  ASSERT_TRUE(before.has_value() && after.has_value());
  const std::vector<MetricDelta> d = diff_metrics(*before, *after, "echo");
  const MetricDelta* queue = find(d, "prism_queue_seconds");
  ASSERT_NE(queue, nullptr);
  EXPECT_EQ(queue->type, "histogram");
  EXPECT_DOUBLE_EQ(queue->count, 20);  // "other" left out
  EXPECT_NEAR(queue->sum, 0.10, 1e-12);
  EXPECT_NEAR(*queue->mean(), 0.005, 1e-12);
  // Bucket deltas: 10 in (0, 1 ms], 10 in (1, 10 ms]: the median is the first bucket's top.
  EXPECT_NEAR(*queue->p50, 0.001, 1e-12);
  EXPECT_NEAR(*queue->p99, 0.001 + 0.009 * (19.8 - 10) / 10, 1e-12);
  const MetricDelta* requests = find(d, "prism_requests_total");
  ASSERT_NE(requests, nullptr);
  EXPECT_DOUBLE_EQ(requests->delta, 20);  // 18 ok + 2 error (a new series counts from 0)
  ASSERT_EQ(requests->series.size(), 2u);
  const MetricDelta* depth = find(d, "prism_queue_depth");
  ASSERT_NE(depth, nullptr);
  EXPECT_DOUBLE_EQ(depth->after, 3);
  const MetricDelta* hits = find(d, "vllm:prefix_cache_hits");  // OpenMetrics: family without _total
  ASSERT_NE(hits, nullptr);
  EXPECT_DOUBLE_EQ(hits->delta, 12);
  // Without a model every deployment counts.
  EXPECT_DOUBLE_EQ(find(diff_metrics(*before, *after, ""), "prism_queue_seconds")->count, 120);
}

TEST(PrometheusText, HistogramQuantileLikePrometheus) {
  const std::vector<std::pair<double, double>> b = {{0.001, 3}, {0.01, 5}, {INFINITY, 6}};
  EXPECT_NEAR(*histogram_quantile(0.5, b), 0.001, 1e-12);                     // rank 3 ends bucket 1
  EXPECT_NEAR(*histogram_quantile(0.6, b), 0.001 + 0.009 * 0.6 / 2, 1e-12);  // rank 3.6 in bucket 2
  EXPECT_NEAR(*histogram_quantile(0.99, b), 0.01, 1e-12);                    // +Inf bucket: highest bound
  EXPECT_FALSE(histogram_quantile(0.5, {{1, 0}, {INFINITY, 0}}).has_value());
}

TEST(HttpUrl, Parses) {
  Result<HttpEndpoint> e = parse_http_url("http://127.0.0.1:8080");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, "8080");
  EXPECT_EQ(e->base_path, "");
  EXPECT_EQ(e->host_header, "127.0.0.1:8080");
  e = parse_http_url("http://[::1]:9000/v1/");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->base_path, "");  // a trailing /v1 is the OpenAI base-URL habit
  EXPECT_EQ(e->host_header, "[::1]:9000");
  e = parse_http_url("http://example.com/prefix/v1");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->port, "80");
  EXPECT_EQ(e->base_path, "/prefix");
  EXPECT_EQ(e->host_header, "example.com");
  for (const char* bad : {"https://x", "ftp://x", "http://", "http://:80", "http://x:0", "http://x:99999", "http://x:a",
                          "http://u:p@x", "http://x/?q=1", "127.0.0.1:8080"})
    EXPECT_FALSE(parse_http_url(bad).has_value()) << bad;
}

TEST(ChatMeter, TtftItlTpotFromChunkTimes) {
  std::unique_ptr<ResponseMeter> m = make_chat_meter({{"input_tokens", 50}});
  auto chunk = [](const std::string& content) {
    return nlohmann::json({{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", {{"content", content}}}}}}})
        .dump();
  };
  m->on_event(nlohmann::json({{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}}}}}}}).dump(), 0.02);  // no content
  m->on_event(chunk("Hel"), 0.10);
  m->on_event(chunk("lo"), 0.15);
  m->on_event(chunk("!"), 0.25);
  m->on_event(R"({"choices":[],"usage":{"prompt_tokens":48,"completion_tokens":3,"total_tokens":51}})", 0.26);
  m->on_event("[DONE]", 0.27);
  const Measurement r = m->finish(0.30);
  ASSERT_EQ(r.malformed, "");
  EXPECT_DOUBLE_EQ(r.units.at("output_tokens"), 3);
  EXPECT_DOUBLE_EQ(r.units.at("input_tokens"), 48);
  EXPECT_DOUBLE_EQ(r.latencies_s.at("ttft").at(0), 0.10);
  ASSERT_EQ(r.latencies_s.at("itl").size(), 2u);
  EXPECT_NEAR(r.latencies_s.at("itl")[0], 0.05, 1e-12);
  EXPECT_NEAR(r.latencies_s.at("itl")[1], 0.10, 1e-12);
  EXPECT_NEAR(r.latencies_s.at("tpot").at(0), (0.30 - 0.10) / 2, 1e-12);
}

TEST(ChatMeter, CountsChunksWithoutUsageAndRejectsBrokenStreams) {
  std::unique_ptr<ResponseMeter> m = make_chat_meter({{"input_tokens", 50}});
  m->on_event(R"({"choices":[{"delta":{"content":"a"}}]})", 0.1);
  m->on_event(R"({"choices":[{"delta":{"reasoning_content":"b"}}]})", 0.2);
  m->on_event("[DONE]", 0.3);
  Measurement r = m->finish(0.3);
  ASSERT_EQ(r.malformed, "");
  EXPECT_DOUBLE_EQ(r.units.at("output_tokens"), 2);
  EXPECT_DOUBLE_EQ(r.units.at("input_tokens"), 50);  // the estimate, without usage

  m = make_chat_meter({});
  m->on_event(R"({"choices":[{"delta":{"content":"a"}}]})", 0.1);
  EXPECT_NE(m->finish(0.2).malformed.find("[DONE]"), std::string::npos);

  m = make_chat_meter({});
  m->on_event(R"({"error":{"message":"model overloaded","type":"server_error"}})", 0.1);
  m->on_event("[DONE]", 0.2);
  EXPECT_NE(m->finish(0.2).malformed.find("model overloaded"), std::string::npos);

  m = make_chat_meter({});
  m->on_event("{not json", 0.1);
  EXPECT_FALSE(m->finish(0.2).malformed.empty());

  m = make_chat_meter({});
  m->on_body(R"({"choices":[{"message":{"content":"hi"}}]})");
  EXPECT_FALSE(m->finish(0.2).malformed.empty());
}

WorkloadOptions options() {
  WorkloadOptions o;
  o.model = "m";
  o.seed = 9;
  return o;
}

BenchRequest request_of(const Workload& w, uint64_t index, uint64_t seed = 9) {
  Rng rng = Rng::derive(seed, kRequestStream, index);
  return w.make_request(index, rng);
}

TEST(Workloads, SameSeedSameRequests) {
  for (const std::string& name : workload_names()) {
    Result<std::unique_ptr<Workload>> a = make_workload(name, options()), b = make_workload(name, options());
    ASSERT_TRUE(a.has_value() && b.has_value()) << name;
    EXPECT_EQ(request_of(**a, 5).body, request_of(**b, 5).body) << name;
    EXPECT_NE(request_of(**a, 5).body, request_of(**a, 6).body) << name;
    EXPECT_NE(request_of(**a, 5).body, request_of(**a, 5, 10).body) << name;
    nlohmann::json body = nlohmann::json::parse(request_of(**a, 3).body);
    EXPECT_EQ(body["model"], "m") << name;
    EXPECT_EQ(std::string((*a)->name()), name);
  }
  Result<std::unique_ptr<Workload>> bad = make_workload("video-gen", options());
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("embed-bulk"), std::string::npos);
}

TEST(Workloads, ChatShape) {
  WorkloadOptions o = options();
  o.input_tokens = LengthDistribution::parse("10-20", "").value();
  o.input_tokens_set = true;
  o.output_tokens = LengthDistribution::parse("5-7", "").value();
  o.output_tokens_set = true;
  o.ignore_eos = true;
  o.extra_body = {{"temperature", 0}};
  std::unique_ptr<Workload> w = std::move(make_workload("chat", o).value());
  for (uint64_t i = 0; i < 50; ++i) {
    const BenchRequest r = request_of(*w, i);
    EXPECT_EQ(r.path, "/v1/chat/completions");
    EXPECT_TRUE(r.streaming);
    nlohmann::json b = nlohmann::json::parse(r.body);
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["temperature"], 0);
    EXPECT_GE(b["max_tokens"].get<int>(), 5);
    EXPECT_LE(b["max_tokens"].get<int>(), 7);
    const std::string content = b["messages"][0]["content"];
    const int64_t words = std::count(content.begin(), content.end(), ' ') + 1;
    EXPECT_GE(words, 10);
    EXPECT_LE(words, 20);
    EXPECT_EQ(r.expected.at("input_tokens"), static_cast<double>(words));
  }
}

TEST(Workloads, SharedPrefixTurnsExtendTheirConversation) {
  WorkloadOptions o = options();
  o.num_sessions = 3;
  o.num_turns = 3;
  o.num_system_prompts = 2;
  o.system_tokens = 40;
  std::unique_ptr<Workload> w = std::move(make_workload("chat-shared-prefix", o).value());
  auto messages = [&](uint64_t i) { return nlohmann::json::parse(request_of(*w, i).body)["messages"]; };
  // Slot 1: requests 1, 4, 7 are turns 0, 1, 2 of one conversation; 10 starts a new one.
  const nlohmann::json t0 = messages(1), t1 = messages(4), t2 = messages(7), next = messages(10);
  ASSERT_EQ(t0.size(), 2u);  // system, user
  ASSERT_EQ(t1.size(), 4u);  // system, user, assistant, user
  ASSERT_EQ(t2.size(), 6u);
  for (size_t k = 0; k < t0.size(); ++k) EXPECT_EQ(t1[k], t0[k]);
  for (size_t k = 0; k < t1.size(); ++k) EXPECT_EQ(t2[k], t1[k]);
  EXPECT_EQ(t1[2]["role"], "assistant");
  EXPECT_EQ(next.size(), 2u);
  EXPECT_NE(next[1], t0[1]);
  // Conversations share system prompts: 2 prompts for 3 slots.
  std::set<std::string> systems;
  for (uint64_t i = 0; i < 12; ++i) systems.insert(messages(i)[0]["content"].get<std::string>());
  EXPECT_EQ(systems.size(), 2u);
  const std::string system = t0[0]["content"];
  EXPECT_GE(std::count(system.begin(), system.end(), ' '), 40);
}

TEST(Workloads, EmbedBulkAndItsMeter) {
  WorkloadOptions o = options();
  o.docs_per_request = 3;
  std::unique_ptr<Workload> w = std::move(make_workload("embed-bulk", o).value());
  const BenchRequest r = request_of(*w, 0);
  EXPECT_EQ(r.path, "/v1/embeddings");
  EXPECT_FALSE(r.streaming);
  nlohmann::json b = nlohmann::json::parse(r.body);
  ASSERT_EQ(b["input"].size(), 3u);
  EXPECT_EQ(r.expected.at("docs"), 3);
  std::unique_ptr<ResponseMeter> m = w->make_meter(r);
  m->on_body(R"({"object":"list","data":[{"embedding":[0.1]},{"embedding":[0.2]},{"embedding":"AAAA"}],"usage":{"prompt_tokens":77}})");
  Measurement ok = m->finish(0.1);
  ASSERT_EQ(ok.malformed, "");
  EXPECT_EQ(ok.units.at("docs"), 3);
  EXPECT_EQ(ok.units.at("input_tokens"), 77);
  m = w->make_meter(r);
  m->on_body(R"({"data":[{"embedding":[0.1]}]})");
  EXPECT_NE(m->finish(0.1).malformed.find("expected 3 embeddings, got 1"), std::string::npos);
  m = w->make_meter(r);
  m->on_body("<html>");
  EXPECT_FALSE(m->finish(0.1).malformed.empty());

  std::unique_ptr<Workload> online = std::move(make_workload("embed-online", options()).value());
  for (uint64_t i = 0; i < 30; ++i) {
    nlohmann::json q = nlohmann::json::parse(request_of(*online, i).body);
    ASSERT_TRUE(q["input"].is_string());
    const std::string text = q["input"];
    const int64_t words = std::count(text.begin(), text.end(), ' ') + 1;
    EXPECT_GE(words, 3);
    EXPECT_LE(words, 20);
  }
}

}  // namespace
}  // namespace prism::tools::loadgen

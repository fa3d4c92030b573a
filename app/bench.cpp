// prism bench: flags to tools::loadgen::BenchOptions, then the run and its outputs, or
// --compare of two JSON reports.
#include "app/bench.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "base/file.h"
#include "tools/loadgen/compare_report.h"
#include "tools/loadgen/html_report.h"
#include "tools/loadgen/terminal_report.h"

namespace prism::app {

namespace loadgen = tools::loadgen;

namespace {

Result<loadgen::BenchReport> load_report(const std::string& path) {
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(path + " is not JSON");
  Result<loadgen::BenchReport> r = loadgen::report_from_json(j);
  if (!r.has_value()) return invalid_argument(path + ": " + r.status().message());
  return r;
}

int run_compare(const BenchCommand& c) {
  Result<loadgen::BenchReport> a = load_report(c.compare[0]);
  Result<loadgen::BenchReport> b = a.has_value() ? load_report(c.compare[1]) : Result<loadgen::BenchReport>(a.status());
  if (!b.has_value()) {
    std::fprintf(stderr, "prism bench --compare: %s\n", b.status().message().c_str());
    return 1;
  }
  std::fputs(loadgen::format_comparison(*a, *b, c.compare[0], c.compare[1]).c_str(), stdout);
  return 0;
}

// The flags that need more than CLI11's conversions.
Status resolve_options(BenchCommand& c) {
  loadgen::BenchOptions& o = c.options;
  if (c.load.empty()) c.load = c.rate_given ? "open" : "closed";
  if (c.load != "open" && c.load != "closed") return invalid_argument("--load must be open or closed, got '" + c.load + "'");
  o.plan.mode = c.load == "open" ? loadgen::LoadMode::open : loadgen::LoadMode::closed;
  if (o.plan.mode == loadgen::LoadMode::open && c.concurrency_given)
    return invalid_argument("--concurrency is for --load closed (an open loop sends at --rate; see --max-connections)");
  if (o.plan.mode == loadgen::LoadMode::closed && c.rate_given) return invalid_argument("--rate is for --load open");
  if (!c.sweep.empty() && (c.concurrency_given || c.rate_given))
    return invalid_argument("--sweep gives the load levels: leave out --rate and --concurrency");
  PRISM_ASSIGN_OR_RETURN(o.plan.arrival, loadgen::parse_arrival(c.arrival));
  if (o.plan.duration_s <= 0 && o.plan.num_requests <= 0) o.plan.duration_s = 30;
  std::sort(c.sweep.begin(), c.sweep.end());
  c.sweep.erase(std::unique(c.sweep.begin(), c.sweep.end()), c.sweep.end());
  o.sweep = c.sweep;
  if (!c.input_tokens.empty()) {
    PRISM_ASSIGN_OR_RETURN(o.shape.input_tokens, loadgen::LengthDistribution::parse(c.input_tokens, "--input-tokens"));
    o.shape.input_tokens_set = true;
  }
  if (!c.output_tokens.empty()) {
    PRISM_ASSIGN_OR_RETURN(o.shape.output_tokens, loadgen::LengthDistribution::parse(c.output_tokens, "--output-tokens"));
    o.shape.output_tokens_set = true;
  }
  if (!c.doc_tokens.empty()) {
    PRISM_ASSIGN_OR_RETURN(o.shape.doc_tokens, loadgen::LengthDistribution::parse(c.doc_tokens, "--doc-tokens"));
    o.shape.doc_tokens_set = true;
  }
  if (!c.extra_body.empty()) {
    o.shape.extra_body = nlohmann::json::parse(c.extra_body, nullptr, /*allow_exceptions=*/false);
    if (!o.shape.extra_body.is_object()) return invalid_argument("--extra-body must be a JSON object, e.g. '{\"dimensions\": 128}'");
  }
  o.scrape_metrics = !c.no_metrics;
  return o.validate();
}

}  // namespace

bool BenchCommand::parsed() const { return subcommand != nullptr && subcommand->parsed(); }

std::unique_ptr<BenchCommand> add_bench_command(CLI::App& app) {
  auto c = std::make_unique<BenchCommand>();
  CLI::App* b = app.add_subcommand("bench", "Load-test an OpenAI-compatible server with a realistic workload; "
                                            "or compare two runs (--compare a.json b.json)");
  c->subcommand = b;
  loadgen::BenchOptions& o = c->options;
  o.url = "http://127.0.0.1:8080";
  std::string workloads;
  for (const std::string& w : loadgen::workload_names()) workloads += (workloads.empty() ? "" : ", ") + w;

  b->add_option("--url", o.url, "Server root, http://HOST:PORT (default http://127.0.0.1:8080)");
  b->add_option("--workload", o.workload, "What to send: " + workloads);
  b->add_option("--model", o.shape.model, "Model name (default: the first model of the workload's task in /v1/models)");
  b->add_option("--api-key", o.api_key, "Send 'Authorization: Bearer KEY'");

  b->add_option("--load", c->load, "closed (--concurrency clients) or open (--rate arrivals); default: open if --rate is given");
  b->add_option("--concurrency", o.plan.concurrency, "Closed loop: clients sending back to back (default 1)")
      ->each([cp = c.get()](const std::string&) { cp->concurrency_given = true; });
  b->add_option("--rate", o.plan.rate_per_s, "Open loop: requests per second")
      ->each([cp = c.get()](const std::string&) { cp->rate_given = true; });
  b->add_option("--sweep", c->sweep, "Load levels run one after another, e.g. 1,2,4,8 (concurrencies; rates with --load open)")
      ->delimiter(',');
  b->add_option("--arrival", c->arrival, "Open loop arrivals: poisson (default) or constant");
  b->add_option("--max-connections", o.plan.max_connections, "Open loop: most connections at once (default 256)");
  b->add_option("--duration", o.plan.duration_s, "Seconds measured per load level (default 30 unless --requests)");
  b->add_option("--requests", o.plan.num_requests, "Requests measured per load level");
  b->add_option("--warmup", o.plan.warmup_s, "Seconds of requests sent first and not measured (default 0)");
  b->add_option("--timeout", o.plan.timeout_s, "Seconds a request may take before it counts as a timeout (default 60)");
  b->add_option("--seed", o.plan.seed, "Seed of arrivals and request contents: the same seed sends the same requests (default 0)");

  b->add_option("--input-tokens", c->input_tokens, "Prompt / query length: N, LO-HI or a mix like 16-256@95,512@5");
  b->add_option("--output-tokens", c->output_tokens, "Chat max_tokens: N, LO-HI or a mix");
  b->add_option("--doc-tokens", c->doc_tokens, "embed-bulk document length (default 16-256@95,510@5)");
  b->add_option("--docs-per-request", o.shape.docs_per_request, "embed-bulk documents per request (default 64)");
  b->add_option("--system-tokens", o.shape.system_tokens, "chat-shared-prefix: words in each system prompt (default 1024)");
  b->add_option("--system-prompts", o.shape.num_system_prompts, "chat-shared-prefix: distinct system prompts (default 4)");
  b->add_option("--sessions", o.shape.num_sessions, "chat-shared-prefix: conversations in flight (default 16)");
  b->add_option("--turns", o.shape.num_turns, "chat-shared-prefix: user turns per conversation (default 4)");
  b->add_flag("--ignore-eos", o.shape.ignore_eos, "Ask the server to ignore end-of-sequence (vLLM, llama.cpp) so answers run to max_tokens");
  b->add_option("--extra-body", c->extra_body, "JSON object merged into every request body, e.g. '{\"dimensions\":128}'");

  b->add_option("--json", c->json_path, "Write the results as JSON (what --compare reads)");
  b->add_option("--html", c->html_path, "Write a self-contained HTML report (charts in inline SVG)");
  b->add_flag("--no-metrics", c->no_metrics, "Do not scrape the server's /metrics before and after");
  b->add_option("--metrics-path", o.metrics_path, "Where the server's Prometheus metrics are (default /metrics)");
  b->add_flag("--quiet", c->quiet, "No progress lines on stderr");
  b->add_option("--compare", c->compare, "Print two JSON reports side by side with ratios (b / a)")->expected(2);
  return c;
}

int run_bench(BenchCommand& c) {
  if (!c.compare.empty()) return run_compare(c);
  if (Status s = resolve_options(c); !s.ok()) {
    std::fprintf(stderr, "prism bench: %s\n", s.message().c_str());
    return 2;
  }
  Result<loadgen::BenchReport> report = loadgen::run_bench(c.options, c.quiet ? nullptr : stderr);
  if (!report.has_value()) {
    std::fprintf(stderr, "prism bench: %s\n", report.status().message().c_str());
    return report.status().code() == StatusCode::invalid_argument ? 2 : 1;
  }
  std::fputs(loadgen::format_report_summary(*report).c_str(), stdout);
  std::fflush(stdout);
  int code = 0;
  if (!c.json_path.empty()) {
    if (Status s = write_file(c.json_path, loadgen::to_json(*report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
        !s.ok()) {
      std::fprintf(stderr, "prism bench: %s\n", s.message().c_str());
      code = 1;
    }
  }
  if (!c.html_path.empty()) {
    if (Status s = write_file(c.html_path, loadgen::render_html_report(*report)); !s.ok()) {
      std::fprintf(stderr, "prism bench: %s\n", s.message().c_str());
      code = 1;
    }
  }
  int64_t ok = 0;
  for (const loadgen::PointResult& p : report->points) ok += p.num_ok;
  if (ok == 0) {
    std::fprintf(stderr, "prism bench: no request succeeded (see the errors above)\n");
    code = 1;
  }
  return code;
}

}  // namespace prism::app

// tools/loadgen/bench_run.cpp: model discovery, the sweep loop and server scrapes.
#include "tools/loadgen/bench_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "tools/loadgen/http_client.h"

namespace prism::tools::loadgen {

namespace {

constexpr double kControlTimeoutS = 10;  // listing models, scraping metrics

std::string utc_now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The first model whose Prism task is `task` in GET /v1/models; else the only model.
Result<std::string> pick_model(const ResolvedEndpoint& endpoint, std::string_view task) {
  Result<HttpText> r = fetch_text(endpoint, "GET", "/v1/models", kControlTimeoutS);
  if (!r.has_value()) return unavailable(r.status().message() + "; is the server up? (or pass --model)");
  if (r->status != 200)
    return unavailable("GET /v1/models answered " + std::to_string(r->status) + ": pass --model");
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array())
    return unavailable("GET /v1/models did not answer a model list: pass --model");
  std::vector<std::string> ids;
  for (const nlohmann::json& m : j["data"]) {
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
    const std::string id = m["id"];
    ids.push_back(id);
    const nlohmann::json prism = m.value("prism", nlohmann::json::object());
    if (prism.is_object() && prism.value("task", "") == task) return id;
  }
  if (ids.size() == 1) return ids.front();
  std::string list;
  for (const std::string& id : ids) list += (list.empty() ? "" : ", ") + id;
  return not_found("no model serves task '" + std::string(task) + "' (models: " + (list.empty() ? "none" : list) +
                   "): pass --model");
}

Result<MetricsSnapshot> metrics_from(const Result<HttpText>& text, const std::string& path) {
  if (!text.has_value()) return text.status();
  if (text->status != 200) return unavailable("GET " + path + " answered " + std::to_string(text->status));
  return parse_prometheus_text(text->body);
}

Result<MetricsSnapshot> scrape(const ResolvedEndpoint& endpoint, const std::string& path) {
  return metrics_from(fetch_text(endpoint, "GET", path, kControlTimeoutS), path);
}

nlohmann::json config_json(const BenchOptions& o, const Workload& workload) {
  const LoadPlan& p = o.plan;
  nlohmann::json j = {{"url", o.url},
                      {"workload", workload.describe()},
                      {"mode", mode_name(p.mode)},
                      {"seed", p.seed},
                      {"warmup_s", p.warmup_s},
                      {"timeout_s", p.timeout_s},
                      {"started_at", utc_now_iso8601()},
                      {"metrics", o.scrape_metrics ? o.metrics_path : "off"}};
  if (p.duration_s > 0) j["duration_s"] = p.duration_s;
  else j["requests"] = p.num_requests;
  if (p.mode == LoadMode::open) {
    j["arrival"] = arrival_name(p.arrival);
    j["max_connections"] = p.max_connections;
  }
  if (!o.sweep.empty()) j["sweep"] = o.sweep;
  else if (p.mode == LoadMode::open) j["rate_per_s"] = p.rate_per_s;
  else j["concurrency"] = p.concurrency;
  return j;
}

}  // namespace

Status BenchOptions::validate() const {
  if (url.empty()) return invalid_argument("--url is required");
  if (workload.empty()) {
    std::string names;
    for (const std::string& w : workload_names()) names += (names.empty() ? "" : ", ") + w;
    return invalid_argument("--workload is required (" + names + ")");
  }
  if (plan.duration_s > 0 && plan.num_requests > 0) return invalid_argument("give --duration or --requests, not both");
  if (!(plan.duration_s > 0) && plan.num_requests <= 0) return invalid_argument("give --duration SECONDS or --requests N");
  if (!std::isfinite(plan.duration_s) || plan.duration_s > 7 * 24 * 3600.0) return invalid_argument("--duration is too long");
  if (!(plan.warmup_s >= 0) || !std::isfinite(plan.warmup_s)) return invalid_argument("--warmup must be 0 or more seconds");
  if (!(plan.timeout_s > 0) || !std::isfinite(plan.timeout_s)) return invalid_argument("--timeout must be positive");
  if (plan.max_connections < 1 || plan.max_connections > 65536)
    return invalid_argument("--max-connections must be in [1, 65536]");
  const auto check_load = [&](double v) -> Status {
    if (plan.mode == LoadMode::closed && (v < 1 || v > 65536 || v != std::floor(v)))
      return invalid_argument("a concurrency must be an integer in [1, 65536], got " + std::to_string(v));
    if (plan.mode == LoadMode::open && (!(v > 0) || v > 1e6))
      return invalid_argument("a rate must be in (0, 1000000] requests per second, got " + std::to_string(v));
    return {};
  };
  for (double v : sweep) PRISM_RETURN_IF_ERROR(check_load(v));
  if (sweep.empty()) PRISM_RETURN_IF_ERROR(check_load(plan.mode == LoadMode::closed ? static_cast<double>(plan.concurrency) : plan.rate_per_s));
  if (shape.docs_per_request < 1 || shape.docs_per_request > 100000) return invalid_argument("--docs-per-request must be in [1, 100000]");
  if (shape.system_tokens < 0 || shape.system_tokens > 1000000) return invalid_argument("--system-tokens must be in [0, 1000000]");
  if (shape.num_system_prompts < 1 || shape.num_system_prompts > 100000) return invalid_argument("--system-prompts must be in [1, 100000]");
  if (shape.num_sessions < 1 || shape.num_sessions > 1000000) return invalid_argument("--sessions must be in [1, 1000000]");
  if (shape.num_turns < 1 || shape.num_turns > 1000) return invalid_argument("--turns must be in [1, 1000]");
  if (!shape.extra_body.is_object()) return invalid_argument("--extra-body must be a JSON object");
  if (!metrics_path.starts_with("/")) return invalid_argument("--metrics-path must start with /");
  return {};
}

Result<BenchReport> run_bench(const BenchOptions& options, std::FILE* progress) {
  PRISM_RETURN_IF_ERROR(options.validate());
  PRISM_ASSIGN_OR_RETURN(HttpEndpoint endpoint, parse_http_url(options.url));
  PRISM_ASSIGN_OR_RETURN(ResolvedEndpoint resolved, resolve(endpoint, options.api_key));
  WorkloadOptions shape = options.shape;
  {
    // The workload's task decides which model to pick; the model does not change it.
    PRISM_ASSIGN_OR_RETURN(std::unique_ptr<Workload> probe, make_workload(options.workload, shape));
    if (shape.model.empty()) {
      PRISM_ASSIGN_OR_RETURN(shape.model, pick_model(resolved, probe->task()));
    }
  }
  shape.seed = options.plan.seed;
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<Workload> workload, make_workload(options.workload, shape));

  BenchReport report;
  report.config = config_json(options, *workload);
  report.headline_unit = workload->headline_unit();
  std::vector<double> levels = options.sweep;
  if (levels.empty())
    levels.push_back(options.plan.mode == LoadMode::closed ? static_cast<double>(options.plan.concurrency) : options.plan.rate_per_s);
  for (size_t i = 0; i < levels.size(); ++i) {
    LoadPlan plan = options.plan;
    if (plan.mode == LoadMode::closed) plan.concurrency = static_cast<int64_t>(levels[i]);
    else plan.rate_per_s = levels[i];
    if (progress != nullptr) {
      std::fprintf(progress, "prism bench: %s, %s (%zu/%zu) against %s, model %s\n", std::string(workload->name()).c_str(),
                   load_label(plan.mode, levels[i]).c_str(), i + 1, levels.size(), options.url.c_str(), shape.model.c_str());
      std::fflush(progress);
    }
    // NOTE: the server's "before" is read when the warm-up ends (during the run), so its
    // figures cover the measured requests; without a warm-up, just before the run.
    const bool scrape_in_run = options.scrape_metrics && plan.warmup_s > 0;
    Result<MetricsSnapshot> before = unavailable("--no-metrics");
    if (options.scrape_metrics && !scrape_in_run) before = scrape(resolved, options.metrics_path);
    PRISM_ASSIGN_OR_RETURN(LoadRecords records,
                           run_load(resolved, *workload, plan, scrape_in_run ? options.metrics_path : std::string()));
    if (scrape_in_run) {
      if (!records.metrics_at_measure_start) before = internal_error("the scrape after the warm-up did not run");
      else before = metrics_from(*records.metrics_at_measure_start, options.metrics_path);
    }
    PointResult point = summarize_point(plan, records);
    if (before.has_value()) {
      Result<MetricsSnapshot> after = scrape(resolved, options.metrics_path);
      if (after.has_value()) point.server = diff_metrics(*before, *after, shape.model);
      else point.server_note = "no server metrics: " + after.status().message();
    } else {
      point.server_note = options.scrape_metrics ? "no server metrics: " + before.status().message() : "not scraped (--no-metrics)";
    }
    report.points.push_back(std::move(point));
  }
  report.saturation = find_saturation(report.points);
  return report;
}

}  // namespace prism::tools::loadgen

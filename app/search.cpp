// app/search.cpp: `prism search`: load the folder's index, embed the queries with the same
// model (same space, same dims, the folder's precision unless told) through the in-process
// embed deployment (app/embed_deployment.h), search, print.
#include "app/search.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/embed_deployment.h"
#include "frontends/embed_frontend.h"
#include "pipelines/search/vector_index.h"
#include "runtime/ops.h"

namespace prism::app {

namespace {

using pipelines::search::VectorIndex;

int fail(const std::string& message) {
  std::fprintf(stderr, "prism search: %s\n", message.c_str());
  return 1;
}

constexpr int64_t kQueryBatchTokens = 8192;  // the queries' micro-batch budget

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

CLI::App* add_search_command(CLI::App& app, SearchOptions& o) {
  auto* cmd = app.add_subcommand("search", "Nearest documents of a `prism embed` output folder to query texts");
  cmd->add_option("--index", o.index, "Output folder of `prism embed` (index.faiss is used when present)")->required();
  cmd->add_option("--model", o.model, "The folder's embedding model directory")->required();
  cmd->add_option("--query", o.queries, "Query text (repeatable)")->required();
  cmd->add_option("-k,--top-k", o.k, "Hits per query (default 10)");
  cmd->add_option("--precision", o.precision, "f32, bf16 or int8 (default: the folder's)")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}));
  cmd->add_flag("--truncate", o.truncate, "Cut queries longer than the model's maximum instead of failing");
  cmd->add_flag("--json", o.json, "One JSON object per query instead of ID<TAB>SCORE lines");
  return cmd;
}

int run_search(const SearchOptions& o) {
  // stdout carries the results: logs go to stderr, and only warnings (loading is not news).
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::warn);
  if (o.k < 1) return fail("-k must be at least 1");
  Result<std::unique_ptr<const VectorIndex>> index = VectorIndex::load(o.index);
  if (!index.has_value()) return fail(index.status().message());
  const VectorIndex& vi = *index.value();

  const std::string precision_name = o.precision.empty() ? vi.info().precision : o.precision;
  Result<ops::Precision> precision = ops::parse_precision(precision_name.empty() ? "f32" : precision_name);
  if (!precision.has_value()) return fail(precision.status().message());
  EmbedDeploymentOptions options;
  options.model = o.model;
  options.precision = std::string(ops::precision_name(precision.value()));
  options.batch_tokens = kQueryBatchTokens;
  Result<std::unique_ptr<EmbedDeployment>> deployment = EmbedDeployment::start(options);
  if (!deployment.has_value()) return fail(deployment.status().message());
  const frontends::EmbedFrontend& fe = *deployment.value()->frontend();
  if (fe.space_id() != vi.info().space_id)
    return fail("--model " + o.model + " embeds in space " + fe.space_id() + ", but " + o.index +
                " was made in space " + vi.info().space_id + " (model " + vi.info().model +
                "): vectors of two spaces are not comparable");
  const int64_t dims = vi.dims() == fe.dims() ? 0 : vi.dims();  // a Matryoshka folder: truncate queries too
  if (Status s = fe.check_dimensions(dims); !s.ok()) return fail(s.message());

  std::vector<std::vector<int32_t>> sequences;
  for (size_t i = 0; i < o.queries.size(); ++i) {
    Result<std::vector<int32_t>> ids = fe.tokenize(o.queries[i], o.truncate);
    if (!ids.has_value()) return fail("query " + std::to_string(i) + " " + ids.status().message());
    sequences.push_back(std::move(ids).value());
  }
  Result<std::vector<float>> vectors = deployment.value()->embed(std::move(sequences), dims);
  if (!vectors.has_value()) return fail(vectors.status().message());
  Result<std::vector<std::vector<pipelines::search::SearchHit>>> hits = vi.search(vectors.value(), o.k);
  if (!hits.has_value()) return fail(hits.status().message());

  std::string out;
  for (size_t q = 0; q < hits->size(); ++q) {
    if (o.json) {
      nlohmann::json results = nlohmann::json::array();
      for (const auto& h : (*hits)[q]) results.push_back({{"id", vi.id(h.row)}, {"score", h.score}});
      out += dump({{"query", o.queries[q]}, {"results", std::move(results)}}) + "\n";
      continue;
    }
    if (q > 0) out += "\n";
    for (const auto& h : (*hits)[q]) {
      char score[32];
      std::snprintf(score, sizeof score, "%.6f", h.score);
      out += vi.id(h.row) + "\t" + score + "\n";
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace prism::app

// api/routes/search.cpp: POST /v1/prism/search. Parse and tokenize on the I/O thread, queue
// the queries on the embed deployment, search the index when the vectors come back.
#include "api/routes/search.h"

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "api/errors.h"
#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "api/routes/embeddings.h"
#include "base/log.h"
#include "frontends/embed_frontend.h"
#include "frontends/embed_payload.h"
#include "pipelines/search/vector_index.h"

namespace prism::api {

namespace {

using pipelines::search::VectorIndex;
using IndexMap = std::map<std::string, std::shared_ptr<const VectorIndex>, std::less<>>;

constexpr std::string_view kTask = "embed";

std::string text(std::string_view s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string query_name(bool scalar, size_t i) { return scalar ? "query" : "query[" + std::to_string(i) + "]"; }

struct SearchCall {
  std::string model;
  std::shared_ptr<const VectorIndex> index;
  int64_t top_k = 10;
  int64_t prompt_tokens = 0;
};

std::string search_json(const SearchCall& call, const VectorIndex& index,
                        const std::vector<std::vector<pipelines::search::SearchHit>>& hits) {
  std::string out = R"({"object":"list","data":[)";
  for (size_t q = 0; q < hits.size(); ++q) {
    out += q == 0 ? "" : ",";
    out += R"({"object":"search.result","query_index":)" + std::to_string(q) + R"(,"results":[)";
    for (size_t j = 0; j < hits[q].size(); ++j) {
      out += j == 0 ? R"({"id":)" : R"(,{"id":)";
      out += text(index.id(hits[q][j].row));
      out += R"(,"score":)";
      append_json_float(out, hits[q][j].score);
      out += '}';
    }
    out += "]}";
  }
  const std::string tokens = std::to_string(call.prompt_tokens);
  out += R"(],"model":)" + text(call.model);
  out += R"(,"usage":{"prompt_tokens":)" + tokens + R"(,"total_tokens":)" + tokens + "}";
  out += R"(,"prism":{"embedding_space":)" + text(index.info().space_id) + R"(,"metric":)" +
         text(pipelines::search::index_metric_name(index.metric())) + R"(,"index_size":)" + std::to_string(index.size()) +
         "}}";
  return out;
}

void answer(Responder& responder, const SearchCall& call, Result<serving::PayloadPtr>& result) {
  if (!result.has_value()) {
    if (result.status().code() == StatusCode::cancelled) return;  // nobody is listening
    responder.send(error_response(completion_error(result.status())));
    return;
  }
  const auto* output = dynamic_cast<const frontends::EmbedOutput*>(result.value().get());
  if (output == nullptr) {
    PRISM_LOG_ERROR("request {}: the embed engine returned another payload type", responder.request_id());
    responder.send(error_response(server_error()));
    return;
  }
  auto hits = call.index->search(output->vectors, call.top_k);
  if (!hits.has_value()) {
    PRISM_LOG_ERROR("request {}: search failed: {}", responder.request_id(), hits.status().message());
    responder.send(error_response(server_error()));
    return;
  }
  Response response = Response::json(200, search_json(call, *call.index, hits.value()));
  response.headers.emplace_back("X-Prism-Embedding-Space", call.index->info().space_id);
  responder.send(std::move(response));
}

void post_search(serving::DeploymentSet& deployments, const IndexMap& indexes, const Request& request,
                 Responder responder) {
  JsonFields f(request.body);
  SearchCall call;
  call.model = f.required_string("model");
  if (f.ok() && !f.has("query")) f.fail_missing("query");
  const bool scalar = f.ok() && f.json()["query"].is_string();
  const std::vector<std::string> queries = f.required_strings("query");
  call.top_k = f.optional_int("top_k", 10, 1, kMaxSearchTopK);
  const bool truncate = f.optional_bool("truncate", false);
  const serving::Lane lane = read_priority(f);
  if (f.ok() && static_cast<int64_t>(queries.size()) > kMaxSearchQueries)
    f.fail("query", "holds " + std::to_string(queries.size()) + " queries; at most " +
                        std::to_string(kMaxSearchQueries) + " are allowed per request");
  if (!f.ok()) return (void)responder.send(error_response(f.error()));

  ApiError error;
  Result<serving::Deployment*> d = find_deployment(deployments, call.model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));
  const auto it = indexes.find(call.model);
  if (it == indexes.end())
    return (void)responder.send(error_response(invalid_field(
        "model", "the model '" + call.model +
                     "' has no search index: set its deployment's knob search_index to the output folder of "
                     "`prism embed`")));
  call.index = it->second;
  Result<std::shared_ptr<const frontends::EmbedFrontend>> typed =
      frontend_of<frontends::EmbedFrontend>(*d.value(), call.model);
  if (!typed.has_value()) return (void)responder.send(error_response(completion_error(typed.status())));
  const std::shared_ptr<const frontends::EmbedFrontend> frontend = std::move(typed).value();
  if (frontend->space_id() != call.index->info().space_id)
    return (void)responder.send(error_response(
        invalid_field("model", "the search index of '" + call.model + "' was made in another embedding space (" +
                                   call.index->info().space_id + ") than the model's (" + frontend->space_id() +
                                   "): rebuild it with `prism embed` and this model")));
  // A Matryoshka folder holds truncated vectors: truncate the queries alike.
  const int64_t dims = call.index->dims() == frontend->dims() ? 0 : call.index->dims();
  if (Status s = frontend->check_dimensions(dims); !s.ok())
    return (void)responder.send(error_response(from_status(s, "model")));

  auto payload = std::make_unique<frontends::EmbedInput>();
  payload->dims = dims;
  for (size_t i = 0; i < queries.size(); ++i) {
    if (queries[i].empty())
      return (void)responder.send(
          error_response(invalid_field("query", query_name(scalar, i) + " is an empty string")));
    Result<std::vector<int32_t>> ids = frontend->tokenize(queries[i], truncate);
    if (!ids.has_value())
      return (void)responder.send(error_response(
          from_status(Status(ids.status().code(), query_name(scalar, i) + " " + ids.status().message()), "query")));
    call.prompt_tokens += static_cast<int64_t>(ids->size());
    payload->sequences.push_back(std::move(ids).value());
  }
  const int64_t cost = call.prompt_tokens;
  submit_or_refuse(
      *d.value(), std::move(payload),
      [responder, call = std::move(call)](Result<serving::PayloadPtr> result) mutable {
        answer(responder, call, result);
      },
      cost, lane, responder);
}

}  // namespace

Status add_search_routes(Router& router, serving::DeploymentSet& deployments) {
  auto indexes = std::make_shared<IndexMap>();
  for (const auto& d : deployments.deployments()) {
    const serving::DeploymentConfig& c = d->config();
    if (c.task != kTask || !c.knobs.has("search_index")) continue;
    const std::string origin = c.knobs.origin("search_index");
    const std::string where =
        (origin.empty() ? "" : origin + ": ") + "deployment '" + c.name + "', knob 'search_index'";
    Result<std::string> dir = c.knobs.get_string("search_index", "");
    if (!dir.has_value()) return invalid_argument(where + ": " + dir.status().message());
    Result<std::unique_ptr<const VectorIndex>> index = VectorIndex::load(dir.value());
    if (!index.has_value()) return invalid_argument(where + ": " + index.status().message());
    PRISM_LOG_INFO("deployment '{}': search index {} ({} vectors, {} dims, {})", c.name, dir.value(),
                   index.value()->size(), index.value()->dims(),
                   pipelines::search::index_metric_name(index.value()->metric()));
    indexes->emplace(c.name, std::move(index).value());
  }
  serving::DeploymentSet* set = &deployments;
  router.add("POST", "/v1/prism/search", [set, indexes](const Request& request, Responder responder) {
    post_search(*set, *indexes, request, std::move(responder));
  });
  return {};
}

}  // namespace prism::api

// api/routes/search.h: query → embedding → vector search, online, over the output folder of a
// `prism embed` job. The folder is named by the embed deployment's knob `search_index`; its
// index is loaded when the routes are registered (a bad folder stops start-up).
//   POST /v1/prism/search  {"model": embed deployment, "query": string | [string],
//                           "top_k"?: int (default 10, 1..1000), "truncate"?: bool,
//                           "priority"?: "online"|"bulk"}
//   → {"object": "list", "data": [{"object": "search.result", "query_index",
//        "results": [{"id", "score"}, ...closest first]}], "model",
//      "usage": {"prompt_tokens", "total_tokens"},
//      "prism": {"embedding_space", "metric": "inner_product"|"l2", "index_size"}}
//      with header X-Prism-Embedding-Space. Scores: cosine similarity (normalised models) or
//      squared L2 distance.
// Queries are embedded through the deployment like /v1/embeddings inputs (tokenized here,
// queued, batched) and searched when the engine completes them, on the completing thread
// (an exact search: 2·size·dims FLOP per query).
// Errors (OpenAI's shape): a deployment without search_index, or whose index was made in
// another embedding space → 400; not ready → 503.
// Must not: block an I/O thread, or see tensors.
#pragma once

#include "api/router.h"
#include "base/status.h"
#include "serving/deployment_set.h"

namespace prism::api {

inline constexpr int64_t kMaxSearchQueries = 256;
inline constexpr int64_t kMaxSearchTopK = 1000;

// Loads the index of every embed deployment that sets search_index, then adds the route.
// invalid_argument naming the knob's origin when a folder cannot be loaded. `deployments`
// is not owned and must outlive the server.
Status add_search_routes(Router& router, serving::DeploymentSet& deployments);

}  // namespace prism::api

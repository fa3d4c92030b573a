// tools/loadgen/embed_workloads.h: the embeddings workloads (POST /v1/embeddings, OpenAI shape).
//   embed-online: one short query per request (a few words to ~20 tokens); p99 is what counts.
//   embed-bulk:   many documents per request with a length mix; docs/s is what counts.
#pragma once

#include <memory>

#include "tools/loadgen/workload.h"

namespace prism::tools::loadgen {

std::unique_ptr<Workload> make_embed_online(const WorkloadOptions& options);
std::unique_ptr<Workload> make_embed_bulk(const WorkloadOptions& options);

}  // namespace prism::tools::loadgen

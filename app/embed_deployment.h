// app/embed_deployment.h: the embeddings deployment that `prism embed` and `prism embed-queue
// work` run in-process. It is the server's execution path, not a second one: a
// serving::DeploymentSet built from the engine kinds app/engines.h registers, fed the payload
// POST /v1/embeddings queues (frontends/embed_payload.h), its frontend taken from the
// deployment as the route takes it.
// NOTE: each request is one batch its caller cut (by its own token-budget rule, which a resumed
// `prism embed` relies on to form the same model inputs again), and the deployment runs each
// request as one engine call (max_batch_size 1, micro-batches under batch_tokens). Callers keep
// a few requests in flight, so the next batch is already queued whenever the engine finishes one.
// It must not: read inputs, write outputs, or know about checkpoints and work queues.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "frontends/embed_frontend.h"
#include "serving/deployment_set.h"
#include "serving/metrics.h"

namespace prism::app {

struct EmbedDeploymentOptions {
  std::string model;              // Hugging Face model directory
  std::string precision = "f32";  // f32, bf16 or int8
  // The engine's micro-batch budget (real tokens); a document longer than it runs alone.
  int64_t batch_tokens = 2048;
};

// The vectors of one request: [sequences * out_dims] f32 row-major, in input order, or the
// engine's error.
using EmbedVectors = std::future<Result<std::vector<float>>>;

class EmbedDeployment {
 public:
  // Builds the deployment, loads it (frontend, weights, warm-up) and waits until it serves. A
  // failed load comes back in the loader's words.
  static Result<std::unique_ptr<EmbedDeployment>> start(const EmbedDeploymentOptions& options);
  ~EmbedDeployment();  // stops the deployment once the requests in flight are done
  EmbedDeployment(const EmbedDeployment&) = delete;
  EmbedDeployment& operator=(const EmbedDeployment&) = delete;

  // The deployment's frontend: tokenizer, limits, embedding space.
  const std::shared_ptr<const frontends::EmbedFrontend>& frontend() const { return frontend_; }

  // Any thread. Queues one request: sequences the frontend tokenized or checked (non-empty,
  // at most max_tokens), at `dims` (0: the model's; must pass check_dimensions). The
  // completion fills the future from the replica thread. Refused (not queued): the Status.
  Result<EmbedVectors> submit(std::vector<std::vector<int32_t>> sequences, int64_t dims);
  // submit, then wait for the vectors.
  Result<std::vector<float>> embed(std::vector<std::vector<int32_t>> sequences, int64_t dims);

 private:
  EmbedDeployment() : deployments_(metrics_) {}

  serving::MetricsRegistry metrics_;     // the deployment's series; nobody scrapes them here
  serving::DeploymentSet deployments_;   // one deployment, task "embed"
  serving::Deployment* deployment_ = nullptr;  // not owned: deployments_'s
  std::shared_ptr<const frontends::EmbedFrontend> frontend_;
};

}  // namespace prism::app

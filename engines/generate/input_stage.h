// engines/generate/input_stage.h: what a modality adds to the generate engine's input. The
// core (generate_engine.cpp) runs token ids through the decoder; an input stage gives the
// planned sequences whatever else the forward needs, at fixed points of a request's life and
// of a step, so a new modality is a stage and not a branch of the loop. Stages today:
// media_input.h (a VLM's media rows in place of image tokens) and cross_input.h (a speech
// model's cross-attention memory). A stage runs on its replica's thread only. It must not
// complete requests (it reports them failed; the core removes them), reorder the step's
// items, or hold a compute turn (engines/compute_turn.h) outside a model call.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engines/compute_turn.h"
#include "engines/generate/sequence.h"
#include "models/decoder.h"
#include "runtime/ops.h"
#include "serving/config.h"
#include "serving/metrics.h"

namespace prism::engines::generate {

// Where a processor's probe row (LogitsProcessor::probe_position) is in the step's logits.
enum class ProbeRow : uint8_t {
  none,
  extra,    // one row before the item's rows (a prompt position short of the last)
  sampled,  // the item's first sampled row (the probe position is the prompt's last)
};

// One planned sequence of a step.
struct StepItem {
  Sequence* seq;     // not owned
  int64_t n;         // tokens computed this step
  int64_t rows = 0;  // logits rows: 0, or 1 + drafts when the chunk reaches the last token
  ProbeRow probe = ProbeRow::none;
};

// What a stage is loaded with: the replica's deployment, model and share of the pool.
struct StageContext {
  const serving::DeploymentConfig& config;  // outlives the stage
  ops::Precision precision;
  const models::Decoder& decoder;  // the replica's; outlives the stage
  ComputeMetrics& compute;         // outlives the stage
  int threads;                     // the replica's team (ComputeTurn)
  serving::MetricsRegistry& metrics;
  const serving::Labels& labels;  // the deployment's; read at load only
};

// Requests a stage could not serve, each with its error; the core completes them with it and
// takes their sequences out of the step.
using StageFailures = std::vector<std::pair<RequestState*, Status>>;

class InputStage {
 public:
  virtual ~InputStage() = default;

  // A request's input against the stage's model, at intake: invalid_argument when it lacks
  // what the model needs or is malformed for it.
  virtual Status check(const frontends::GenerateInput& in) const = 0;
  // The request's per-request state of this stage, after every check passed.
  virtual Status admit(RequestState& rs) { return {}; }
  // Whether the request's K/V depends on its token ids (and media seeds) only, so that its
  // blocks may be looked up in and published to the prefix cache.
  virtual bool keys_kv_by_tokens(const RequestState& rs) const { return true; }
  // Before the batch is built: what the planned items need that their requests do not hold
  // yet (the stage's encoder runs here, batched over the step). A request it cannot serve
  // goes into `failed` once.
  virtual void acquire(std::span<const StepItem> items, StageFailures& failed) {}
  // While the batch is built: positions [first_position, first_position + tokens.size()) of a
  // sequence of rs sit at batch rows [first_row, ...); tokens (in the batch) may be set to -1
  // where the stage gives an input embedding instead.
  virtual void place(const RequestState& rs, int64_t first_position, int32_t first_row, std::span<int32_t> tokens) {}
  // The stage's part of the forward's batch (tensors in the step's arena), for items in batch
  // order over num_tokens rows.
  virtual void fill(std::span<const StepItem> items, int64_t num_tokens, models::DecoderBatch& batch) = 0;
  // The stage's part of the decoder's warm-up batch (one sequence, no request).
  virtual void fill_warm_up(models::DecoderBatch& batch) const {}
  // After the forward: frees what no running sequence needs any more.
  virtual void after_step(std::span<const std::unique_ptr<RequestState>> requests,
                          std::span<Sequence* const> running) {}
  // The stage's entry in the engine's describe() and its line in the start-up log.
  virtual void describe(nlohmann::json& engine) const = 0;
  virtual void log_loaded(const std::string& deployment) const = 0;
};

}  // namespace prism::engines::generate

// tools/loadgen/workload.h: what a benchmark sends and how it measures each answer. The load
// generator (load_runner.h) knows only this interface: a new modality (audio, images,
// video) is a new Workload with its own requests, its own units ("audio_seconds", "images")
// and its own latency series ("ttfa"), and one line in make_workload; the runner, the
// statistics and the reports take any unit and any series by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tools/loadgen/length_distribution.h"
#include "tools/loadgen/rng.h"

namespace prism::tools::loadgen {

// Amounts by name: "docs", "input_tokens", "output_tokens"; later "audio_seconds", "images".
// A run reports the rate of each (docs/s, tokens/s).
using Units = std::map<std::string, double>;

struct BenchRequest {
  std::string method = "POST";
  std::string path;          // appended to the URL's path, e.g. "/v1/embeddings"
  std::string content_type = "application/json";
  std::string body;
  bool streaming = false;    // the answer is an event stream (SSE)
  Units expected;            // what it should produce: estimated input tokens, docs, max tokens
};

// What one answer produced, as its workload reads it.
struct Measurement {
  std::string malformed;  // non-empty: why the answer could not be read (counted as an error)
  Units units;            // produced amounts (from the server's usage where it reports it)
  // Latency samples in seconds by series: "ttft", "itl" (several per answer), "tpot". The
  // runner adds "e2e" itself.
  std::map<std::string, std::vector<double>> latencies_s;
};

// Reads one answer as it arrives. The runner creates one per request, feeds it, then calls
// finish() once. Only successful (2xx) answers are fed; times are seconds since the request
// was due to be sent.
class ResponseMeter {
 public:
  virtual ~ResponseMeter() = default;
  // A streamed answer: each event's data (the "data:" lines), read at t_s.
  virtual void on_event(std::string_view data, double t_s) {}
  // An answer that is not streamed: its whole body.
  virtual void on_body(std::string_view body) {}
  // The answer ended at e2e_s (the stream closed, or the body was read).
  virtual Measurement finish(double e2e_s) = 0;
};

// Shapes every workload may read; each uses the fields it needs.
struct WorkloadOptions {
  std::string model;                 // the "model" field of every request
  LengthDistribution input_tokens = LengthDistribution::fixed(256);   // prompts and queries
  LengthDistribution output_tokens = LengthDistribution::fixed(128);  // max_tokens
  LengthDistribution doc_tokens = LengthDistribution::fixed(128);     // documents of bulk requests
  int64_t docs_per_request = 64;
  int64_t system_tokens = 1024;      // chat-shared-prefix: length of each shared system prompt
  int64_t num_system_prompts = 4;    // chat-shared-prefix: distinct system prompts
  int64_t num_sessions = 16;         // chat-shared-prefix: conversations in flight
  int64_t num_turns = 4;             // chat-shared-prefix: user turns per conversation
  bool ignore_eos = false;           // send ignore_eos (vLLM, llama.cpp): answers run to max_tokens
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every request body
  uint64_t seed = 0;
  // Flags the user gave explicitly; a workload keeps its own defaults for the others.
  bool input_tokens_set = false, output_tokens_set = false, doc_tokens_set = false;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string_view name() const = 0;
  // The server task it exercises ("embed", "chat", "echo"): picks a model when none is given.
  virtual std::string_view task() const = 0;
  // Request `index` of the run. NOTE: a pure function of (options, index, rng), and `rng` is
  // derived from (seed, index), so a seed gives the same requests in any send order.
  virtual BenchRequest make_request(uint64_t index, Rng& rng) const = 0;
  virtual std::unique_ptr<ResponseMeter> make_meter(const BenchRequest& request) const = 0;
  // The unit whose rate is the workload's headline throughput ("docs", "output_tokens"),
  // or "requests".
  virtual std::string_view headline_unit() const = 0;
  // The resolved shape, for reports.
  virtual nlohmann::json describe() const = 0;
};

// The workloads by name; invalid_argument listing them for an unknown name.
Result<std::unique_ptr<Workload>> make_workload(std::string_view name, const WorkloadOptions& options);
std::vector<std::string> workload_names();

// The JSON body with options.extra_body merged in (its keys win), dumped.
std::string request_body(nlohmann::json body, const WorkloadOptions& options);

}  // namespace prism::tools::loadgen

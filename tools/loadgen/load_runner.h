// tools/loadgen/load_runner.h: drives one load level against a server and records every
// request. Closed loop: `concurrency` clients, each sending its next request when the last
// one answered. Open loop: requests leave on an arrival schedule whatever the server does,
// over up to max_connections keep-alive connections (beyond them a request waits for one;
// its latency still counts from when it was due). One thread, one io_context; each request
// has a deadline, so a server that stalls or fails cannot hang or crash the run. It reads no
// answer itself (the workload's meter does) and computes no statistic (bench_result.h does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "tools/loadgen/arrival_schedule.h"
#include "tools/loadgen/http_client.h"
#include "tools/loadgen/workload.h"

namespace prism::tools::loadgen {

enum class LoadMode { closed, open };

struct LoadPlan {
  LoadMode mode = LoadMode::closed;
  int64_t concurrency = 1;        // closed loop
  double rate_per_s = 1;          // open loop
  Arrival arrival = Arrival::poisson;
  int64_t max_connections = 256;  // open loop
  // How long the measured phase lasts: duration_s > 0 (requests started before its end), or
  // num_requests > 0 (that many measured requests).
  double duration_s = 0;
  int64_t num_requests = 0;
  double warmup_s = 0;            // requests started before this are sent but not measured
  double timeout_s = 60;          // per request, from when it is sent
  uint64_t seed = 0;
};

// One request as measured. Times are seconds from the start of the run; start_s is when it
// was due (open loop: its arrival time; closed loop: when its client sent it).
struct RequestRecord {
  uint64_t index = 0;
  double start_s = 0, end_s = 0;
  int http_status = 0;
  std::string error;         // empty: success; else "http_500", "timeout", "malformed", ...
  std::string error_detail;  // what the server or the parser said
  Measurement measurement;   // of a success
};

struct LoadRecords {
  std::vector<RequestRecord> measured;  // in completion order
  int64_t num_warmup = 0;               // sent during warm-up (not measured)
  double elapsed_s = 0;                 // the whole run, warm-up included
  double schedule_s = 0;                // open loop: due time of the last measured request
  // The GET of run_load's metrics_path when the warm-up ended; empty without one of them.
  std::optional<Result<HttpText>> metrics_at_measure_start;
};

// What a request started at t_s (seconds from the start) is, given how many measured ones
// have started: the run ends at warmup_s + duration_s, or after num_requests measured ones.
enum class RequestPhase { warmup, measured, stop };
RequestPhase request_phase(const LoadPlan& plan, double t_s, int64_t num_measured_started);

// Runs the plan; the Status is for a plan that cannot run at all (every other failure is a
// record's error). With a warm-up and a metrics_path, that path is fetched when the warm-up
// ends, so the server's figures can leave the warm-up out.
Result<LoadRecords> run_load(const ResolvedEndpoint& endpoint, const Workload& workload, const LoadPlan& plan,
                             const std::string& metrics_path = {});

}  // namespace prism::tools::loadgen

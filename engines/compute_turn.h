// engines/compute_turn.h: how an engine runs its model calls on the process's one compute
// pool. A ComputeTurn holds runtime/compute_gate.h's gate for the replica's OpenMP team while
// it lives, and adds the time it waited for the gate and the time it held it to the
// deployment's prism_compute_wait_seconds_total and prism_compute_busy_seconds_total.
// Rule: a turn covers compute only (a forward, an encoder run, sampling): never a queue wait,
// a completion callback, or I/O. Every engine thread that computes takes one; a thread that
// is no engine's (HTTP, media decoding, schedulers) runs its OpenMP regions with a team of one.
#pragma once

#include "runtime/compute_gate.h"
#include "serving/metrics.h"

namespace prism::engines {

// The deployment's series (replicas share them: same labels, same series).
struct ComputeMetrics {
  ComputeMetrics(serving::MetricsRegistry& m, const serving::Labels& labels);
  serving::Counter& busy_seconds;
  serving::Counter& wait_seconds;
};

class ComputeTurn {
 public:
  // Blocks until the team of `threads` fits in the pool (runtime/compute_gate.h: first come,
  // first served). metrics: not owned, outlives the turn.
  ComputeTurn(ComputeMetrics& metrics, int threads);
  ~ComputeTurn();
  ComputeTurn(const ComputeTurn&) = delete;
  ComputeTurn& operator=(const ComputeTurn&) = delete;

 private:
  ComputeMetrics& metrics_;
  ComputeGate::Lease lease_;
};

// The replica's OpenMP team: its share of the pool (num_threads() / replicas, at least 1), set
// on the calling thread (omp_set_num_threads writes that thread's ICV only). Returns it.
int set_replica_team(int replicas);

}  // namespace prism::engines

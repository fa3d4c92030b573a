// engines/compute_turn.cpp: see compute_turn.h.
#include "engines/compute_turn.h"

#include <algorithm>

#include "runtime/threads.h"

namespace prism::engines {

ComputeMetrics::ComputeMetrics(serving::MetricsRegistry& m, const serving::Labels& labels)
    : busy_seconds(m.counter("prism_compute_busy_seconds_total",
                             "Seconds the deployment's engines held the compute pool (model calls).", labels)),
      wait_seconds(m.counter("prism_compute_wait_seconds_total",
                             "Seconds the deployment's engines waited for the compute pool while others held it.",
                             labels)) {}

ComputeTurn::ComputeTurn(ComputeMetrics& metrics, int threads)
    : metrics_(metrics), lease_(ComputeGate::process().acquire(threads)) {
  metrics_.wait_seconds.inc(lease_.waited_seconds());
}

ComputeTurn::~ComputeTurn() {
  if (lease_.threads() > 0) metrics_.busy_seconds.inc(lease_.held_seconds());  // a nested turn is its outer one's time
}

// NOTE: replicas share the cores without oversubscription because each replica thread sets
// its own OpenMP team size: omp_set_num_threads writes the calling thread's nthreads-var ICV
// (libgomp keeps it per thread), and each replica thread that opens a parallel region gets a
// team of its own. So N replicas × max(1, num_threads() / N) threads ≈ the pool, and their
// turns (one share each) fit in the gate side by side. omp_set_num_threads is called directly
// (not prism::set_num_threads) because only this thread's share changes, never the pool.
int set_replica_team(int replicas) {
  const int threads = std::max(1, num_threads() / std::max(1, replicas));
  omp_set_num_threads(threads);
  return threads;
}

}  // namespace prism::engines

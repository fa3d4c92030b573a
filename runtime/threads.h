// The one thread pool: OpenMP's, which oneDNN (built with the OpenMP runtime) shares. Never
// start another pool next to it: on a 2-core machine two pools make everything 3-4x slower.
// Deployments share it through runtime/compute_gate.h (they take turns on it; replicas split
// it); every other thread (HTTP, media decoding, schedulers) runs its OpenMP regions with a
// team of one (omp_set_num_threads(1) at the thread's start).
#pragma once

#include <omp.h>

#include <atomic>
#include <cstdint>

namespace prism {

// Sets the OpenMP (and so oneDNN) thread count for the process, and the compute gate's
// capacity to it. n <= 0: the CPU allowance's default (runtime/cpu_allowance.h: the affinity
// mask, capped by a cgroup CPU quota).
// Threads started afterwards (replicas) read it with num_threads() and call
// omp_set_num_threads with their share on themselves.
void set_num_threads(int n);
int num_threads();  // the process's count as last set (the CPU allowance's default before any set)

// Test seam: while enabled, counts the parallel_for regions of more than one thread and the
// threads of their teams, process-wide (each region's team counted by its master from the
// region's start to its end), so a test can check that concurrent engines never run more
// compute threads than the pool has and never open a team wider than the compute lease
// (runtime/compute_gate.h) their thread holds. Off (the default) it costs one relaxed load
// per region.
namespace thread_census {
void enable(bool on);    // on: also resets the counts
int most();              // the most threads in parallel_for teams at once
int64_t regions();       // regions with a team of more than one thread
int64_t beyond_lease();  // of those, opened with a team wider than the opening thread's lease
namespace detail {
extern std::atomic<bool> on;
void enter(int team);
void leave(int team);
}  // namespace detail
}  // namespace thread_census

// Runs fn(begin, end) over chunks of [0, n) on the pool; at least `grain` items a chunk,
// so small loops stay on the calling thread.
template <class Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t max_chunks = (n + grain - 1) / grain;
  if (max_chunks <= 1) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel
  {
    // NOTE: static partition into one contiguous range per thread: no scheduling overhead,
    // and each thread's ranges are stable from call to call (cache locality).
    const int64_t nt = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    const bool census = t == 0 && thread_census::detail::on.load(std::memory_order_relaxed);
    if (census) thread_census::detail::enter(int(nt));
    const int64_t chunks = max_chunks < nt ? max_chunks : nt;
    if (t < chunks) {
      const int64_t per = n / chunks, rem = n % chunks;
      const int64_t b = t * per + (t < rem ? t : rem);
      fn(b, b + per + (t < rem ? 1 : 0));
    }
    if (census) thread_census::detail::leave(int(nt));
  }
}

}  // namespace prism

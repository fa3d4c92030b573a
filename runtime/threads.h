// The one thread pool: OpenMP's, which oneDNN (built with the OpenMP runtime) shares. Never
// start another pool next to it: on a 2-core machine two pools make everything 3-4x slower.
#pragma once

#include <omp.h>

#include <cstdint>

namespace prism {

// Sets the OpenMP (and so oneDNN) thread count for the process. n <= 0: one per core.
// Threads started afterwards (replicas) read it with num_threads() and call
// omp_set_num_threads with their share on themselves.
void set_num_threads(int n);
int num_threads();  // the process's count as last set (OpenMP's default before any set)
int num_cores();

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
    const int64_t chunks = max_chunks < nt ? max_chunks : nt;
    if (t < chunks) {
      const int64_t per = n / chunks, rem = n % chunks;
      const int64_t b = t * per + (t < rem ? t : rem);
      fn(b, b + per + (t < rem ? 1 : 0));
    }
  }
}

}  // namespace prism

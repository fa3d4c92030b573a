// bench/bench_timing.h: how the kernel benches time a call on the shared machine. A Timing says
// how many repetitions of at least how many seconds, and which clock: the wall clock, or (for
// one-thread runs) the calling thread's CPU clock, which counts only the time the thread ran
// and so what a kernel does per core-second, whatever the neighbours do.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>

#include "runtime/memory_bandwidth.h"

namespace prism::bench {

struct Timing {
  double rep_seconds = 0.3;       // each repetition runs the call for at least this long
  int reps = 4;                   // the best repetition counts
  bool thread_cpu_clock = false;  // time by the calling thread's CPU clock (one-thread runs)

  double now() const {
    if (thread_cpu_clock) {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  // Best seconds per call of fn over the repetitions, after one untimed call (primitive
  // creation, scratch growth, first touch).
  double best_seconds(const std::function<void()>& fn) const {
    fn();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      int iters = 0;
      const double t0 = now();
      double t = t0;
      do {
        fn();
        ++iters;
        t = now();
      } while (t - t0 < rep_seconds);
      best = std::min(best, (t - t0) / iters);
    }
    return best;
  }

  // Read bandwidth (GB/s) over 1 GiB, best of 3, by the same clock (one thread with the CPU
  // clock): the scale for decode figures.
  double read_bandwidth_gbs() const {
    return thread_cpu_clock ? measure_read_bandwidth_gbs(size_t(1) << 30, 3, 1, true)
                            : measure_read_bandwidth_gbs(size_t(1) << 30, 3);
  }
};

}  // namespace prism::bench

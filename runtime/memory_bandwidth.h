// runtime/memory_bandwidth.h: the memory ceilings that memory-bound work (decode linears,
// attention over a long cache) is judged against, measured in the same run, since this
// machine's bandwidth swings 2x with the neighbours. The read probe streams a buffer far
// larger than the caches through the active tier's widest loads (cpu/stream_read.h), so it
// measures the memory and not the loop, on every tier. For benches and `prism info`; nothing
// on a serving path calls it (it allocates and touches `bytes`).
#pragma once

#include <cstddef>

namespace prism {

// Read bandwidth in GB/s (1e9 bytes/s): the best of `passes` streaming sums over `bytes`, on
// `threads` threads (0: the pool's count, num_threads()). thread_cpu_clock (with threads = 1):
// time by the calling thread's CPU clock instead of the wall clock, for one-thread figures on
// a machine whose neighbours deschedule us.
double measure_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int passes = 5, int threads = 0,
                                  bool thread_cpu_clock = false);

// Copy bandwidth in GB/s, counting bytes read plus written: the ceiling of an op that reads
// one tensor and writes another of the same size. Best of `passes` over `bytes` each way.
double measure_copy_bandwidth_gbs(size_t bytes = size_t(256) << 20, int passes = 5);

}  // namespace prism

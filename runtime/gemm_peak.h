// runtime/gemm_peak.h: the GEMM ceiling a model's throughput is judged against, measured the
// way models run GEMMs (ops::linear on packed weights). `prism info` prints it; benchmarks
// measure it again in the same run, since this machine's speed drifts from minute to minute.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "runtime/ops.h"

namespace prism {

// Best-repetition throughput of x[size, size] @ W^T[size, size] over about `seconds` of
// repetitions, in GFLOP/s (GOP/s for int8).
Result<double> measure_gemm_peak(ops::Precision precision, int64_t size = 1024, double seconds = 0.33);

}  // namespace prism

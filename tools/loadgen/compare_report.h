// tools/loadgen/compare_report.h: `prism bench --compare a.json b.json`: two runs side by side,
// load level by load level, with the ratio b / a of every figure (throughputs, latency
// percentiles, error rate, server metric means) and both saturation points.
#pragma once

#include <string>

#include "tools/loadgen/bench_result.h"

namespace prism::tools::loadgen {

// Levels are paired by load value (concurrency or rate) when both runs have it, else by
// position; a level only one run has is listed as such.
std::string format_comparison(const BenchReport& a, const BenchReport& b, const std::string& name_a,
                              const std::string& name_b);

}  // namespace prism::tools::loadgen

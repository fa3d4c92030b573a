// tools/loadgen/terminal_report.h: the summary `prism bench` prints: per load level the
// requests, throughputs, latency percentiles, errors and the server's notable metric deltas;
// for a sweep, one line per level and the saturation point.
#pragma once

#include <string>

#include "tools/loadgen/bench_result.h"

namespace prism::tools::loadgen {

std::string format_point_summary(const PointResult& point, const std::string& headline_unit);
std::string format_report_summary(const BenchReport& report);

}  // namespace prism::tools::loadgen

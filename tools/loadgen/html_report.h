// tools/loadgen/html_report.h: the report as one self-contained HTML file: inline CSS and SVG
// written here, no script, nothing fetched from the network. It holds the latency-against-
// throughput curves of the load levels (a sweep), throughput against load, percentile bars
// per latency series, the results, errors and server metrics, and the run's config.
#pragma once

#include <string>

#include "tools/loadgen/bench_result.h"

namespace prism::tools::loadgen {

std::string render_html_report(const BenchReport& report);

}  // namespace prism::tools::loadgen

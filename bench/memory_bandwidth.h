// bench/memory_bandwidth.h: the benches' names for the memory ceilings, which now live in the
// runtime (runtime/memory_bandwidth.h: a per-tier streaming read, so the probe runs at full
// speed on every instruction-set tier). New code includes runtime/memory_bandwidth.h and
// calls prism::measure_*; this header keeps the benches' prism::bench:: spellings.
#pragma once

#include "runtime/memory_bandwidth.h"

namespace prism::bench {

using prism::measure_copy_bandwidth_gbs;
using prism::measure_read_bandwidth_gbs;

}  // namespace prism::bench

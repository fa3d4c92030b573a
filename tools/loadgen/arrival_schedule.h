// tools/loadgen/arrival_schedule.h: when an open-loop run sends each request. Requests leave at
// these times whether or not earlier ones have answered (that is what makes the loop open),
// and latency is measured from them, so a client-side wait counts against the server it was
// caused by (no coordinated omission). Deterministic: a seed gives the same times.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "tools/loadgen/rng.h"

namespace prism::tools::loadgen {

enum class Arrival {
  poisson,   // exponential gaps with mean 1 / rate: independent users
  constant,  // a gap of exactly 1 / rate
};

Result<Arrival> parse_arrival(std::string_view name);
std::string_view arrival_name(Arrival a);

class ArrivalSchedule {
 public:
  // rate_per_s > 0 (a bug otherwise: options validate it).
  ArrivalSchedule(Arrival kind, double rate_per_s, uint64_t seed);

  // The next send time in seconds from the start of the run: 0 first, then increasing.
  double next_s();

 private:
  Arrival kind_;
  double rate_per_s_;
  Rng rng_;
  uint64_t count_ = 0;
  double t_s_ = 0;
};

}  // namespace prism::tools::loadgen

// tools/loadgen/arrival_schedule.cpp: Poisson and constant arrival times.
#include "tools/loadgen/arrival_schedule.h"

#include "base/check.h"

namespace prism::tools::loadgen {

Result<Arrival> parse_arrival(std::string_view name) {
  if (name == "poisson") return Arrival::poisson;
  if (name == "constant") return Arrival::constant;
  return invalid_argument("--arrival must be poisson or constant, got '" + std::string(name) + "'");
}

std::string_view arrival_name(Arrival a) { return a == Arrival::poisson ? "poisson" : "constant"; }

ArrivalSchedule::ArrivalSchedule(Arrival kind, double rate_per_s, uint64_t seed)
    : kind_(kind), rate_per_s_(rate_per_s), rng_(Rng::derive(seed, kArrivalStream)) {
  PRISM_CHECK(rate_per_s > 0);
}

double ArrivalSchedule::next_s() {
  if (count_++ == 0) return t_s_;
  if (kind_ == Arrival::constant) {
    // Multiplying, not summing gaps, keeps the schedule free of accumulated rounding.
    t_s_ = static_cast<double>(count_ - 1) / rate_per_s_;
  } else {
    t_s_ += rng_.exponential(rate_per_s_);
  }
  return t_s_;
}

}  // namespace prism::tools::loadgen

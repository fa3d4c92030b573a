// tools/loadgen/length_distribution.cpp: parsing and sampling length mixes.
#include "tools/loadgen/length_distribution.h"

#include <algorithm>
#include <charconv>

namespace prism::tools::loadgen {

namespace {

constexpr int64_t kMaxLength = 1'000'000;

bool parse_int(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_weight(std::string_view s, double& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Result<LengthDistribution> LengthDistribution::parse(std::string_view spec, std::string_view what) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(std::string(what) + " '" + std::string(spec) + "': " + why +
                            " (a length N, a range LO-HI, or a mix like 16-256@95,512@5)");
  };
  LengthDistribution d;
  d.spec_ = spec;
  std::string_view rest = spec;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    Part p;
    if (const size_t at = part.find('@'); at != std::string_view::npos) {
      if (!parse_weight(part.substr(at + 1), p.weight) || !(p.weight > 0)) return bad("the weight must be a positive number");
      part = part.substr(0, at);
    }
    if (const size_t dash = part.find('-'); dash != std::string_view::npos) {
      if (!parse_int(part.substr(0, dash), p.lo) || !parse_int(part.substr(dash + 1), p.hi)) return bad("not a range");
    } else {
      if (!parse_int(part, p.lo)) return bad("not a length");
      p.hi = p.lo;
    }
    if (p.lo < 1 || p.hi > kMaxLength) return bad("lengths must be in [1, 1000000]");
    if (p.hi < p.lo) return bad("the range is empty");
    d.parts_.push_back(p);
    d.total_weight_ += p.weight;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return d;
}

LengthDistribution LengthDistribution::fixed(int64_t n) {
  LengthDistribution d;
  d.parts_.push_back({n, n, 1});
  d.total_weight_ = 1;
  d.spec_ = std::to_string(n);
  return d;
}

int64_t LengthDistribution::sample(Rng& rng) const {
  double pick = rng.uniform() * total_weight_;
  for (const Part& p : parts_) {
    if (pick < p.weight || &p == &parts_.back()) return rng.uniform_int(p.lo, p.hi);
    pick -= p.weight;
  }
  return parts_.back().lo;  // not reached
}

double LengthDistribution::mean() const {
  double m = 0;
  for (const Part& p : parts_) m += p.weight / total_weight_ * (static_cast<double>(p.lo + p.hi) / 2.0);
  return m;
}

int64_t LengthDistribution::max() const {
  int64_t m = 0;
  for (const Part& p : parts_) m = std::max(m, p.hi);
  return m;
}

}  // namespace prism::tools::loadgen

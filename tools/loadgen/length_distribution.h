// tools/loadgen/length_distribution.h: how long the prompts, documents and answers of a
// workload are. A spec is a weighted mix of fixed lengths and uniform ranges:
//   "128"                 always 128
//   "64-512"              uniform in [64, 512]
//   "16-256@95,512@5"     95% uniform in [16, 256], 5% exactly 512 (weights are relative)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tools/loadgen/rng.h"

namespace prism::tools::loadgen {

class LengthDistribution {
 public:
  // invalid_argument naming `what` (the flag) for a spec that does not parse, a length below
  // 1 or above 1,000,000, an empty range or a weight that is not positive.
  static Result<LengthDistribution> parse(std::string_view spec, std::string_view what);
  static LengthDistribution fixed(int64_t n);

  int64_t sample(Rng& rng) const;
  double mean() const;
  int64_t max() const;
  const std::string& spec() const { return spec_; }

 private:
  struct Part {
    int64_t lo = 1, hi = 1;
    double weight = 1;
  };
  std::vector<Part> parts_;
  double total_weight_ = 0;
  std::string spec_;
};

}  // namespace prism::tools::loadgen

// engines/denoise/precision_schedule.h: which linear precision runs at which step and block
// range of a denoise pass (a hook the acceleration work fills in: e.g. bf16 early steps, f32
// late ones). Plain data, no policy: the default is one precision everywhere.
// NOTE: rules are checked in order and the first that covers (step, block) wins; uncovered
// pairs take default_precision. Ranges are half-open: [first_step, last_step), [first_block, last_block).
#pragma once

#include <limits>
#include <vector>

#include "runtime/ops.h"

namespace prism::engines::denoise {

struct PrecisionRule {
  int first_step = 0, last_step = std::numeric_limits<int>::max();
  int first_block = 0, last_block = std::numeric_limits<int>::max();
  ops::Precision precision = ops::Precision::f32;
};

struct PrecisionSchedule {
  ops::Precision default_precision = ops::Precision::f32;
  std::vector<PrecisionRule> rules;

  ops::Precision at(int step, int block) const {
    for (const PrecisionRule& r : rules)
      if (step >= r.first_step && step < r.last_step && block >= r.first_block && block < r.last_block)
        return r.precision;
    return default_precision;
  }
  // True when every (step, block) runs default_precision: the engine need not split passes.
  bool uniform() const { return rules.empty(); }
};

}  // namespace prism::engines::denoise

// engines/denoise/precision_schedule: the hook's lookup rule (first covering rule wins,
// half-open ranges, the default elsewhere).
#include "engines/denoise/precision_schedule.h"

#include <gtest/gtest.h>

namespace prism::engines::denoise {
namespace {

using ops::Precision;

TEST(DenoisePrecisionSchedule, DefaultEverywhere) {
  PrecisionSchedule s;
  EXPECT_TRUE(s.uniform());
  EXPECT_EQ(s.at(0, 0), Precision::f32);
  s.default_precision = Precision::bf16;
  EXPECT_EQ(s.at(49, 29), Precision::bf16);
}

TEST(DenoisePrecisionSchedule, FirstCoveringRuleWins) {
  PrecisionSchedule s;
  s.default_precision = Precision::bf16;
  s.rules.push_back({0, 10, 0, 2, Precision::f32});  // early steps, first two blocks
  s.rules.push_back({0, 20, 0, 30, Precision::int8});
  EXPECT_FALSE(s.uniform());
  EXPECT_EQ(s.at(0, 0), Precision::f32);
  EXPECT_EQ(s.at(9, 1), Precision::f32);
  EXPECT_EQ(s.at(10, 1), Precision::int8);  // half-open step range
  EXPECT_EQ(s.at(5, 2), Precision::int8);   // half-open block range
  EXPECT_EQ(s.at(20, 0), Precision::bf16);
}

}  // namespace
}  // namespace prism::engines::denoise

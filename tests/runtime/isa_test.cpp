// The instruction-set tier: names, what the CPU supports, and that the choice is made once.
#include "runtime/isa.h"

#include <gtest/gtest.h>

#include "runtime/cpu_features.h"

namespace prism {
namespace {

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : all_isas()) {
    Result<Isa> parsed = parse_isa(isa_name(isa));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, isa);
  }
  Result<Isa> bad = parse_isa("avx9000");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("expected avx2, avx512, avx512_bf16 or amx"), std::string::npos);
}

TEST(Isa, TiersAreNested) {
  // A CPU that supports a tier supports every tier below it.
  bool below = true;
  for (Isa isa : all_isas()) {
    if (cpu_supports(isa)) {
      EXPECT_TRUE(below) << isa_name(isa);
    } else {
      below = false;
      EXPECT_FALSE(missing_features(isa).empty()) << isa_name(isa);
    }
  }
}

TEST(Isa, TheBestTierFollowsTheFeatures) {
  const CpuFeatures& f = cpu_features();
  Result<Isa> best = best_isa();
  ASSERT_TRUE(best.has_value());  // the test main refuses CPUs below AVX2
  EXPECT_EQ(*best >= Isa::avx512, f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_EQ(*best >= Isa::avx512_bf16, *best >= Isa::avx512 && f.avx512_bf16 && f.avx512_vnni);
}

TEST(Isa, TheActiveTierIsFixedOnce) {
  const Isa active = active_isa();
  EXPECT_LE(active, *best_isa());
  EXPECT_TRUE(select_isa(active).ok());
  for (Isa other : all_isas()) {
    if (other == active) continue;
    const Status s = select_isa(other);
    EXPECT_FALSE(s.ok()) << isa_name(other);
    if (cpu_supports(other)) EXPECT_NE(s.message().find("already fixed"), std::string::npos) << s.message();
    else EXPECT_NE(s.message().find("lacks"), std::string::npos) << s.message();
  }
  EXPECT_EQ(active_isa(), active);
}

}  // namespace
}  // namespace prism

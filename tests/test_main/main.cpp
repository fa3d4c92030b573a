// The main() of every test executable: GoogleTest, after the instruction-set tier is chosen.
// PRISM_ISA=avx2|avx512|avx512_bf16|amx forces a tier (tests/CMakeLists.txt registers the
// tier-sensitive tests once per tier that way); a tier this CPU cannot run makes the whole
// executable a skip (exit code 77, which CTest reports as "Skipped") with the reason printed,
// and so does a forced tier that is already this CPU's best (the unforced run covers it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/isa.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const char* forced = std::getenv("PRISM_ISA");
  if (prism::Result<prism::Isa> best = prism::best_isa(); !best.has_value()) {
    std::printf("SKIPPED: %s\n", best.status().message().c_str());
    return 77;
  }
  if (forced != nullptr && *forced != '\0') {
    prism::Result<prism::Isa> isa = prism::parse_isa(forced);
    if (isa.has_value() && *isa == *prism::best_isa()) {
      std::printf("SKIPPED (PRISM_ISA=%s): this is the CPU's best tier, which the unforced run covers\n", forced);
      return 77;
    }
    if (prism::Status s = prism::select_isa_from_env(forced); !s.ok()) {
      std::printf("SKIPPED (PRISM_ISA=%s): %s\n", forced, s.message().c_str());
      return 77;
    }
  }
  return RUN_ALL_TESTS();
}

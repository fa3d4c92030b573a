// Entry points of the prism subcommands; each returns the process exit code.
#pragma once

namespace prism::app {

// prism info; this_tier_gemm_only: print just this tier's GEMM row (for the per-tier children).
int run_info(bool this_tier_gemm_only);

}  // namespace prism::app

// runtime/cpu/kernel_paths.cpp: what `prism info` says about the paths ops take on this tier.
#include <string>

#include "runtime/cpu/attention_kernel.h"
#include "runtime/isa.h"
#include "runtime/ops.h"

namespace prism::ops {

std::string attention_path() {
  int lo = 0, hi = 0;  // the range of multiples of 8 the tiled kernel admits
  for (int d = 8; d <= 512; d += 8)
    if (cpu::attention_fast_path(d)) {
      if (lo == 0) lo = d;
      hi = d;
    }
  const std::string tier(isa_name(active_isa()));
  const std::string bf16 =
      cpu::attention_bf16_native()
          ? "; bf16 precision, non-causal: oneDNN bf16 matmuls per query chunk (" + cpu::attention_bf16_impl() +
                "), f32 softmax; causal: the f32 kernel"
          : "; bf16 precision: the f32 kernel (no native bf16 on this tier)";
  if (lo == 0) return tier + ": scalar kernel for every head dim" + bf16;
  return tier + " tiled flash kernel for head dims " + std::to_string(lo) + ", " + std::to_string(lo + 8) + ", ... " +
         std::to_string(hi) + " (multiples of 8); a scalar kernel for any other" + bf16;
}

}  // namespace prism::ops

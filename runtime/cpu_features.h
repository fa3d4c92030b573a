// What the CPU can do, detected once; kernels pick their path from it and `prism info`
// reports it in one line.
#pragma once

#include <string>

namespace prism {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  std::string brand;  // "AMD EPYC 9R14 96-Core Processor"

  std::string summary() const;  // "avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_vnni avx512_bf16"
};

const CpuFeatures& cpu_features();

}  // namespace prism

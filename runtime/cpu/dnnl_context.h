// The oneDNN engine and streams of the cpu backend. Internal to runtime/cpu/: nothing outside
// this folder includes dnnl.hpp, so the rest of the build stays lean.
#pragma once

#include <dnnl.hpp>

#include "runtime/isa.h"
#include "runtime/tensor.h"

namespace prism::cpu {

dnnl::engine& dnnl_engine();  // one per process
dnnl::stream& dnnl_stream();  // one per calling thread: oneDNN streams are not shared

dnnl::memory::data_type to_dnnl(DType dtype);

// Caps oneDNN's own ISA dispatch at the tier's (avx2, avx512_core, avx512_core_bf16,
// avx512_core_amx), so a forced tier exercises oneDNN's kernels of that tier too. Must run
// before oneDNN creates its first primitive (oneDNN ignores a later call).
void limit_onednn_isa(Isa isa);

}  // namespace prism::cpu

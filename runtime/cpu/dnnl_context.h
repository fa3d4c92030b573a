// The oneDNN engine and streams of the cpu backend. Internal to runtime/cpu/: nothing outside
// this folder includes dnnl.hpp, so the rest of the build stays lean.
#pragma once

#include <dnnl.hpp>

#include "runtime/tensor.h"

namespace prism::cpu {

dnnl::engine& dnnl_engine();  // one per process
dnnl::stream& dnnl_stream();  // one per calling thread: oneDNN streams are not shared

dnnl::memory::data_type to_dnnl(DType dtype);

}  // namespace prism::cpu

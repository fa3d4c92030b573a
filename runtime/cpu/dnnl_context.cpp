// oneDNN engine and per-thread streams.
#include "runtime/cpu/dnnl_context.h"

namespace prism::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::memory::data_type to_dnnl(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i8: return dt::s8;
    case DType::u8: return dt::u8;
    case DType::i32: return dt::s32;
    default: PRISM_CHECK_MSG(false, "dtype has no oneDNN equivalent");
  }
  return dt::undef;
}

void limit_onednn_isa(Isa isa) {
  dnnl::cpu_isa max = dnnl::cpu_isa::all;
  switch (isa) {
    case Isa::avx2: max = dnnl::cpu_isa::avx2; break;
    case Isa::avx512: max = dnnl::cpu_isa::avx512_core; break;
    case Isa::avx512_bf16: max = dnnl::cpu_isa::avx512_core_bf16; break;
    case Isa::amx: max = dnnl::cpu_isa::avx512_core_amx; break;
  }
  (void)dnnl::set_max_cpu_isa(max);
}

}  // namespace prism::cpu

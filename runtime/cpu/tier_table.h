// runtime/cpu/tier_table.h: how the ops of runtime/cpu/ reach the kernels of their tier. A
// kernel area (rows, attention, linear, ...) is a struct of function pointers; its source under
// runtime/cpu/kernels/ defines one instance per tier (the file is compiled once per tier, into
// prism::cpu::<tier>), and the op asks for the active tier's instance. The choice is made once
// per area, on first use, from active_isa() (runtime/isa.h).
#pragma once

#include "runtime/isa.h"

// Declares the instance of `Type` named `name` that every tier's copy of a kernels/ file
// defines (`extern const Type name = {...};` inside namespace prism::cpu::PRISM_TIER).
#define PRISM_TIER_TABLES(Type, name)            \
  namespace avx2 { extern const Type name; }     \
  namespace avx512 { extern const Type name; }   \
  namespace avx512_bf16 { extern const Type name; }

namespace prism::cpu {

// The instance of a tier; amx runs the avx512_bf16 kernels (its AMX GEMMs are oneDNN's).
template <class T>
const T& tier_table_for(Isa isa, const T& avx2, const T& avx512, const T& avx512_bf16) {
  switch (isa) {
    case Isa::avx2: return avx2;
    case Isa::avx512: return avx512;
    case Isa::avx512_bf16:
    case Isa::amx: return avx512_bf16;
  }
  return avx2;
}

// The active tier's instance.
template <class T>
const T& tier_table(const T& avx2, const T& avx512, const T& avx512_bf16) {
  return tier_table_for(active_isa(), avx2, avx512, avx512_bf16);
}

}  // namespace prism::cpu

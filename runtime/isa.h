// runtime/isa.h: the instruction-set tier the cpu kernels run at. Every kernel of runtime/cpu/
// has a path per tier, compiled into the one binary (runtime/cpu/kernels/ is built once per
// tier); the process picks one tier, once, before the first kernel or oneDNN primitive runs:
// the best the CPU can execute, or a lower one forced by select_isa (PRISM_ISA in app/, the
// tests and the benches), so one machine can exercise the paths of another.
// Must not: be switched after kernels ran (packed weights are laid out for one tier).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace prism {

enum class Isa : uint8_t {
  avx2,         // AVX2 + FMA + F16C: the floor; Prism refuses to start below it
  avx512,       // AVX-512 F/BW/VL/DQ
  avx512_bf16,  // the same with AVX512_BF16 and AVX512_VNNI
  amx,          // the same with AMX tiles (bf16 and int8), used by oneDNN's GEMMs
};

// Lowest first.
std::span<const Isa> all_isas();
std::string_view isa_name(Isa isa);  // "avx2", "avx512", "avx512_bf16", "amx"
Result<Isa> parse_isa(std::string_view name);

// Whether this CPU can execute the tier; else what it lacks ("avx512_bf16 avx512_vnni").
bool cpu_supports(Isa isa);
std::string missing_features(Isa isa);

// The CPU's best tier; an error naming the missing features when it is below the floor.
Result<Isa> best_isa();

// Forces a tier at or below best_isa(). Call before any kernel runs: once active_isa() has
// been read the tier is fixed, and asking for another one is an error.
Status select_isa(Isa isa);
// Reads PRISM_ISA's value (unset or empty: keep the default) and selects it. For the
// programs' main()s (app, tests, benches), which read the environment themselves.
Status select_isa_from_env(const char* value);

// The tier in force; fixes it on first call (best_isa() unless select_isa chose one).
// PRISM_CHECKs that the CPU is at or above the floor: main()s check best_isa() first.
Isa active_isa();

}  // namespace prism

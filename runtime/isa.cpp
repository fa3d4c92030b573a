// runtime/isa.cpp: see isa.h. The choice is made once, under a mutex; afterwards active_isa()
// is a read of a function-local static.
#include "runtime/isa.h"

#include <array>
#include <mutex>
#include <optional>

#include "base/check.h"
#include "runtime/cpu/dnnl_context.h"
#include "runtime/cpu_features.h"

namespace prism {
namespace {

constexpr std::array<Isa, 4> kIsas = {Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx};

std::mutex g_mu;
bool g_fixed = false;            // active_isa() has been read: no change any more
std::optional<Isa> g_selected;   // select_isa's choice

// The features a tier needs that the CPU lacks, each tier including the ones below it.
std::string missing(Isa isa, const CpuFeatures& f) {
  std::string out;
  auto need = [&](bool has, const char* name) {
    if (!has) out += (out.empty() ? "" : " ") + std::string(name);
  };
  need(f.avx2, "avx2");
  need(f.fma, "fma");
  need(f.f16c, "f16c");
  if (isa >= Isa::avx512) {
    need(f.avx512f, "avx512f");
    need(f.avx512bw, "avx512bw");
    need(f.avx512vl, "avx512vl");
    need(f.avx512dq, "avx512dq");
  }
  if (isa >= Isa::avx512_bf16) {
    need(f.avx512_bf16, "avx512_bf16");
    need(f.avx512_vnni, "avx512_vnni");
  }
  if (isa >= Isa::amx) {
    need(f.amx_tile, "amx_tile");
    need(f.amx_bf16, "amx_bf16");
    need(f.amx_int8, "amx_int8");
  }
  return out;
}

}  // namespace

std::span<const Isa> all_isas() { return kIsas; }

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::amx: return "amx";
  }
  return "?";
}

Result<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kIsas)
    if (name == isa_name(isa)) return isa;
  return invalid_argument("unknown instruction-set tier '" + std::string(name) +
                          "' (expected avx2, avx512, avx512_bf16 or amx)");
}

std::string missing_features(Isa isa) { return missing(isa, cpu_features()); }

bool cpu_supports(Isa isa) { return missing_features(isa).empty(); }

Result<Isa> best_isa() {
  if (!cpu_supports(Isa::avx2))
    return failed_precondition("Prism needs an x86-64 CPU with AVX2, FMA and F16C (x86-64-v3); this one lacks " +
                               missing_features(Isa::avx2) + " (it has: " + cpu_features().summary() + ")");
  Isa best = Isa::avx2;
  for (Isa isa : kIsas)
    if (cpu_supports(isa)) best = isa;
  return best;
}

Status select_isa(Isa isa) {
  if (!cpu_supports(isa))
    return failed_precondition("this CPU cannot run the " + std::string(isa_name(isa)) + " tier: it lacks " +
                               missing_features(isa));
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_fixed) {
    if (isa == active_isa()) return Status();
    return failed_precondition("the instruction-set tier is already fixed at " + std::string(isa_name(active_isa())));
  }
  g_selected = isa;
  // oneDNN takes its own limit once, before its first primitive: set it now, so a primitive
  // created before any of our kernels ran is limited too.
  cpu::limit_onednn_isa(isa);
  return Status();
}

Status select_isa_from_env(const char* value) {
  if (value == nullptr || *value == '\0') return Status();
  PRISM_ASSIGN_OR_RETURN(Isa isa, parse_isa(value));
  return select_isa(isa);
}

Isa active_isa() {
  static const Isa isa = [] {
    std::lock_guard<std::mutex> lock(g_mu);
    g_fixed = true;
    if (g_selected) return *g_selected;
    Result<Isa> best = best_isa();
    PRISM_CHECK_MSG(best.has_value(), "the CPU lacks AVX2/FMA/F16C: main() must check best_isa() first");
    return *best;
  }();
  return isa;
}

}  // namespace prism

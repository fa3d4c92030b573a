// CPUID-based feature detection (x86-64). The OS must also enable the AVX-512 state (XCR0),
// which __builtin_cpu_supports checks for us.
#include "runtime/cpu_features.h"

#include <cpuid.h>

#include <cstring>

namespace prism {
namespace {

std::string read_brand() {
  unsigned regs[12] = {};
  unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext < 0x80000004u) return "unknown CPU";
  for (unsigned i = 0; i < 3; ++i)
    __get_cpuid(0x80000002u + i, &regs[i * 4], &regs[i * 4 + 1], &regs[i * 4 + 2], &regs[i * 4 + 3]);
  char buf[49] = {};
  std::memcpy(buf, regs, 48);
  std::string s(buf);
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? "unknown CPU" : s.substr(b, e - b + 1);
}

// CPUID leaf 7 EDX: AMX-BF16 (bit 22), AMX-TILE (24), AMX-INT8 (25). Whether the kernel lets
// the process use the tile state is asked by oneDNN itself (arch_prctl) before it runs AMX.
unsigned leaf7_edx() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  return d;
}

CpuFeatures detect() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  const unsigned edx7 = leaf7_edx();
  f.amx_bf16 = (edx7 >> 22) & 1u;
  f.amx_tile = (edx7 >> 24) & 1u;
  f.amx_int8 = (edx7 >> 25) & 1u;
  f.brand = read_brand();
  return f;
}

}  // namespace

std::string CpuFeatures::summary() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(amx_tile, "amx_tile");
  add(amx_bf16, "amx_bf16");
  add(amx_int8, "amx_int8");
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace prism

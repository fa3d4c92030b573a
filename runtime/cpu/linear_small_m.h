// runtime/cpu/linear_small_m.h: the bf16 linear for a few rows (decode), a GEMV-like kernel
// that streams the weights once at memory speed. Internal to runtime/cpu/: PackedLinear
// takes it for rows <= kSmallMMaxRows and keeps oneDNN for the rest. It reads oneDNN's own
// packed weights (no second copy), so it only exists when oneDNN chose the layout it knows.
// Threads only through OpenMP; no allocation in steady state (thread-local scratch).
#pragma once

#include <cstdint>
#include <optional>

#include <dnnl.hpp>

#include "runtime/dtype.h"
#include "runtime/ops.h"

namespace prism::cpu {

// Rows up to which ops::linear (bf16) takes this kernel (see the NOTE at the top of
// linear_small_m.cpp). The kernel itself takes up to 16 rows (run_small_m, for benches).
constexpr int64_t kSmallMMaxRows = 8;

// oneDNN's brgemm bf16 weights for a [K, N] matmul ("BA16a64b2a": blocks of 32 k x 64 n,
// the K blocks of each 64-column group back to back): element (k, n) sits at
//   (n / 64) * group_stride + (k / 2) * 128 + (n % 64) * 2 + k % 2,
// so one k pair of 16 consecutive columns is 32 bf16 (64 bytes), the operand of one
// _mm512_dpbf16_ps. Padding (K to k_pairs * 2, N to 64) holds zeros.
struct Bf16PanelWeights {
  const bf16* data = nullptr;  // not owned: the PackedLinear's oneDNN memory
  int64_t k = 0, n = 0;        // real sizes
  int64_t k_pairs = 0;         // padded K / 2
  int64_t group_stride = 0;    // elements from one 64-column group to the next
};

// The view when `desc` is that layout (else nullopt: the caller stays on oneDNN).
std::optional<Bf16PanelWeights> bf16_panel_weights(const dnnl::memory::desc& desc, const void* data, int64_t k,
                                                   int64_t n);

// y[rows, n] = act(x[rows, k] (row stride ld) @ W^T + bias), bias [n] or null. rows >= 1.
void small_m_linear_bf16(const float* x, int64_t rows, int64_t ld, const Bf16PanelWeights& w, const float* bias,
                         ops::Activation act, float* y);

}  // namespace prism::cpu

// runtime/cpu/linear_bf16_widen.cpp: packing of bf16 weights into the panel layout of the
// widen kernel (linear_kernels.h, Bf16WidenWeights), and its inverse widened to f32 for the
// large-M path through oneDNN. Baseline code: copies with a permutation; the kernel itself is
// per tier (kernels/linear_bf16_widen.cpp).
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "runtime/arena.h"
#include "runtime/cpu/linear_kernels.h"
#include "runtime/threads.h"

namespace prism::cpu {

Bf16WidenWeights pack_bf16_widen(const bf16* w, int64_t n, int64_t k, int panel_width) {
  PRISM_CHECK_MSG(panel_width > 0 && panel_width % 2 == 0, "pack_bf16_widen: bad panel width");
  const int64_t P = panel_width, half = P / 2;
  Bf16WidenWeights out;
  out.n = n;
  out.k = k;
  out.panel_width = panel_width;
  out.panels = (n + P - 1) / P;
  const size_t elems = size_t(out.panels * k * P);
  out.memory = allocate_aligned(elems * sizeof(bf16));
  bf16* dst = static_cast<bf16*>(out.memory.get());
  out.data = dst;
  // Panel p, row j, column c: position 2 (c % half) + c / half of the row (see the layout).
  parallel_for(out.panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      bf16* panel = dst + p * k * P;
      for (int64_t c = 0; c < P; ++c) {
        const int64_t col = p * P + c, pos = 2 * (c % half) + c / half;
        if (col >= n) {
          for (int64_t j = 0; j < k; ++j) panel[j * P + pos] = bf16{0};
          continue;
        }
        const bf16* src = w + col * k;
        for (int64_t j = 0; j < k; ++j) panel[j * P + pos] = src[j];
      }
    }
  });
  return out;
}

void widen_bf16_panels(const Bf16WidenWeights& w, int64_t p0, int64_t p1, float* out) {
  PRISM_CHECK_MSG(p0 >= 0 && p0 < p1 && p1 <= w.panels, "widen_bf16_panels: panel range out of bounds");
  const int64_t P = w.panel_width, half = P / 2, k = w.k;
  const int64_t col0 = p0 * P, cols = std::min(w.n, p1 * P) - col0;
  parallel_for(k, std::max<int64_t>(1, 4096 / cols), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      float* row = out + j * cols;
      for (int64_t p = p0; p < p1; ++p) {
        const bf16* src = w.data + (p * k + j) * P;
        float* dst = row + (p - p0) * P;
        // Position 2i holds column i, 2i + 1 column half + i (the layout above).
        if (cols - (p - p0) * P >= P) {
          for (int64_t i = 0; i < half; ++i) {
            dst[i] = bf16_to_f32(src[2 * i]);
            dst[half + i] = bf16_to_f32(src[2 * i + 1]);
          }
        } else {
          for (int64_t c = 0; c < cols - (p - p0) * P; ++c) dst[c] = bf16_to_f32(src[2 * (c % half) + c / half]);
        }
      }
    }
  });
}

}  // namespace prism::cpu

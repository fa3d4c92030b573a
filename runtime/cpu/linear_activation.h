// runtime/cpu/linear_activation.h: ops::Activation applied in the epilogues of our own linear
// kernels (the int8 epilogue, the small-M bf16 kernel), on 16 floats or one. Internal to
// runtime/cpu/. NOTE: these are vec_math.h's forms, the ones ops::gelu/silu use; they agree
// with oneDNN's fused post-ops (gelu_erf, gelu_tanh, swish; quick_gelu is swish with
// alpha 1.702) to f32 accuracy, so every path of ops::linear computes one function.
#pragma once

#include "runtime/cpu/vec_math.h"
#include "runtime/ops.h"

namespace prism::cpu {

// QuickGELU, x * sigmoid(1.702 x), in the form ops::quick_gelu computes (runtime/cpu/
// activation.cpp), so the fused and unfused forms agree to the ulp.
inline constexpr float kQuickGeluAlpha = 1.702f;
inline float quick_gelu_scalar(float x) { return x * sigmoid_scalar(kQuickGeluAlpha * x); }

#if defined(__AVX512F__)
inline __m512 quick_gelu512(__m512 x) {
  return _mm512_mul_ps(x, sigmoid512(_mm512_mul_ps(x, _mm512_set1_ps(kQuickGeluAlpha))));
}

inline __m512 activate512(__m512 v, ops::Activation act) {
  switch (act) {
    case ops::Activation::none: return v;
    case ops::Activation::relu: return _mm512_max_ps(v, _mm512_setzero_ps());
    case ops::Activation::gelu_erf: return gelu_erf512(v);
    case ops::Activation::gelu_tanh: return gelu_tanh512(v);
    case ops::Activation::silu: return silu512(v);
    case ops::Activation::quick_gelu: return quick_gelu512(v);
  }
  return v;
}
#endif

inline float activate(float v, ops::Activation act) {
  switch (act) {
    case ops::Activation::none: return v;
    case ops::Activation::relu: return v > 0.0f ? v : 0.0f;
    case ops::Activation::gelu_erf: return gelu_erf_scalar(v);
    case ops::Activation::gelu_tanh: return gelu_tanh_scalar(v);
    case ops::Activation::silu: return silu_scalar(v);
    case ops::Activation::quick_gelu: return quick_gelu_scalar(v);
  }
  return v;
}

}  // namespace prism::cpu

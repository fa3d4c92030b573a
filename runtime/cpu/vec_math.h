// The scalar forms of the math the cpu kernels share: exp, erfc, sigmoid and the activations,
// for loop tails and scalar paths, and the constants their vector twins use
// (runtime/cpu/kernels/vec_math.h, one per tier). Inline and header-only.
// NOTE: the vector and scalar forms agree to a few ulp, not bit for bit; tests compare both
// against double-precision references, never against each other. Nothing here allocates,
// branches on data, or touches global state.
#pragma once

#include <cmath>

#include "runtime/ops.h"

namespace prism::cpu {

// The NR/Chebyshev form of erfc: erfc(z) ~= t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2), with
// fractional error below 1.2e-7 for every z >= 0 (Numerical Recipes, erfcc). Relative, not
// absolute, accuracy is what GELU needs for negative inputs, where 0.5 * erfc is tiny.
inline constexpr float kErfcCoeffs[10] = {-1.26551223f, 1.00002368f, 0.37409196f,  0.09678418f,
                                          -0.18628806f, 0.27886807f, -1.13520398f, 1.48851587f,
                                          -0.82215223f, 0.17087277f};

inline float exp_scalar(float x) { return std::exp(x); }
inline float sigmoid_scalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// Phi(x) = P(N(0,1) < x) = 0.5 * erfc(-x / sqrt 2): GELU(x) = x * Phi(x).
inline float normal_cdf_scalar(float x) {
  return float(0.5 * std::erfc(-double(x) * 0.70710678118654752440));
}

// The activations, each as x * (a factor in [0, 1]) so that no form cancels on either tail.
// Shared by the activation ops and the epilogues of linear.
inline constexpr float kSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluTanhCubic = 0.044715f;
inline float gelu_erf_scalar(float x) { return x * normal_cdf_scalar(x); }
// 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
inline float gelu_tanh_scalar(float x) {
  return x * sigmoid_scalar(2.0f * kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x));
}
inline float silu_scalar(float x) { return x * sigmoid_scalar(x); }
// QuickGELU, x * sigmoid(1.702 x): CLIP's activation (transformers' QuickGELU).
inline constexpr float kQuickGeluAlpha = 1.702f;
inline float quick_gelu_scalar(float x) { return x * sigmoid_scalar(kQuickGeluAlpha * x); }

// ops::Activation on one float.
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

// runtime/cpu/kernels/vec_math.h: exp, sigmoid, Phi and the activations on one Vec of the
// tier (simd.h), the vector twins of runtime/cpu/vec_math.h's scalar forms. Inline, in the
// tier's namespace; nothing here allocates, branches on data or touches global state.
// NOTE: the vector and scalar forms agree to a few ulp, not bit for bit; tests compare both
// against double-precision references, never against each other.
#pragma once

#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/ops.h"

namespace prism::cpu::PRISM_TIER {

// exp(x), within ~1 ulp over the float range; 0 below ~-103.3 (the last denormal), inf above
// ~88.7, NaN in gives NaN out.
// NOTE: x = n ln2 + r with |r| <= ln2 / 2; e^r by its degree-7 Taylor polynomial (truncation
// 5e-9 relative); scale_by_pow2 applies 2^n, so overflow and underflow saturate without a branch.
inline Vec exp(Vec x) {
  const Vec xc = min(max(x, splat(-104.0f)), splat(89.0f));
  const Vec n = round_even(xc * splat(1.44269504088896341f));
  // ln2 split in two so n * ln2_hi is exact for |n| < 2^9.
  Vec r = fnma(n, splat(0.693145751953125f), xc);
  r = fnma(n, splat(1.428606765330187045e-06f), r);
  Vec p = splat(1.0f / 5040);
  p = fma(p, r, splat(1.0f / 720));
  p = fma(p, r, splat(1.0f / 120));
  p = fma(p, r, splat(1.0f / 24));
  p = fma(p, r, splat(1.0f / 6));
  p = fma(p, r, splat(0.5f));
  p = fma(p, r, splat(1.0f));
  p = fma(p, r, splat(1.0f));
  Vec y = scale_by_pow2(p, n);
  // Below the clamp the true value is under half the smallest denormal: exactly 0, as
  // std::exp gives (softmax over a -inf mask relies on it).
  y = zero_unless(not_le(x, splat(-104.0f)), y);
  // min/max dropped NaNs; put them back.
  return select(is_nan(x), x, y);
}

// 2^x for x <= 0 (the only arguments softmax has: scores minus their running max, in log2
// units). Leaner than exp, which also handles overflow, NaN and exact underflow.
// 2^x = 2^n * 2^f with |f| <= 1/2; 2^f by its degree-7 Taylor polynomial (relative error
// < 1e-8 before rounding). Below -126 it returns 2^-126 instead of a smaller number or 0, a
// relative weight no softmax can see; NaN in (-inf + inf) is the caller's to mask.
inline Vec exp2_nonpositive(Vec x) {
  x = max(x, splat(-126.0f));
  const Vec n = round_even(x);
  const Vec f = x - n;
  Vec p = splat(1.5252733804059841e-05f);  // ln2^k / k!
  p = fma(p, f, splat(1.5403530393381606e-04f));
  p = fma(p, f, splat(1.3333558146428443e-03f));
  p = fma(p, f, splat(9.6181291076284772e-03f));
  p = fma(p, f, splat(5.5504108664821580e-02f));
  p = fma(p, f, splat(2.4022650695910071e-01f));
  p = fma(p, f, splat(6.9314718055994531e-01f));
  p = fma(p, f, splat(1.0f));
  return scale_by_pow2(p, n);
}

// 1 / (1 + exp(-x)), accurate in relative terms on both tails. Below x ~ -87 the true value
// is under 1e-38; the cap on 1 + exp(-x) (which keeps the reciprocal away from inf) returns
// 1e-38 there instead.
inline Vec sigmoid(Vec x) {
  const Vec e = exp(zero() - x);
  return reciprocal(min(splat(1.0f) + e, splat(1e38f)));
}

// erfc(z) for z >= 0 given z and z^2 as the unevaluated sum z2_hi + z2_lo (the low part keeps
// exp(-z^2) accurate for large z, where rounding z^2 would cost ~z^2 * 6e-8 relative).
inline Vec erfc_nonneg(Vec z, Vec z2_hi, Vec z2_lo) {
  const Vec one = splat(1.0f);
  const Vec t = reciprocal(fma(z, splat(0.5f), one));
  Vec p = splat(kErfcCoeffs[9]);
  for (int i = 8; i >= 0; --i) p = fma(p, t, splat(kErfcCoeffs[i]));
  const Vec e = exp(p - z2_hi);
  // exp(-z2_lo) ~= 1 - z2_lo: |z2_lo| < 2^-24 z^2, tiny.
  return (t * e) * fnma(z2_lo, one, one);
}

// Phi(x) = 0.5 * erfc(-x / sqrt 2), relative error ~2e-7 on both tails (GELU erf form).
inline Vec normal_cdf(Vec x) {
  // Past |x| = 20 the tail underflows to 0; the clamp also keeps x^2 finite.
  const Vec ax = min(abs(x), splat(20.0f));
  // z^2 = x^2 / 2 exactly as hi + lo (the halving is exact): no rounding of x / sqrt 2 there.
  const Vec x2 = ax * ax;
  const Vec x2_lo = fms(ax, ax, x2);
  const Vec half = splat(0.5f);
  const Vec z = ax * splat(0.70710678118654752f);
  const Vec tail = half * erfc_nonneg(z, x2 * half, x2_lo * half);
  // x >= 0: 1 - tail; x < 0: tail.
  return select(x < zero(), tail, splat(1.0f) - tail);
}

inline Vec gelu_erf(Vec x) { return x * normal_cdf(x); }
inline Vec gelu_tanh(Vec x) {
  const Vec x3 = (x * x) * x;
  const Vec u2 = fma(x3, splat(kGeluTanhCubic), x) * splat(2.0f * kSqrt2OverPi);
  return x * sigmoid(u2);
}
inline Vec silu(Vec x) { return x * sigmoid(x); }
inline Vec quick_gelu(Vec x) { return x * sigmoid(x * splat(kQuickGeluAlpha)); }

// ops::Activation on a vector: the epilogue of the linear kernels and the activation ops.
inline Vec activate(Vec v, ops::Activation act) {
  switch (act) {
    case ops::Activation::none: return v;
    case ops::Activation::relu: return max(v, zero());
    case ops::Activation::gelu_erf: return gelu_erf(v);
    case ops::Activation::gelu_tanh: return gelu_tanh(v);
    case ops::Activation::silu: return silu(v);
    case ops::Activation::quick_gelu: return quick_gelu(v);
  }
  return v;
}

}  // namespace prism::cpu::PRISM_TIER

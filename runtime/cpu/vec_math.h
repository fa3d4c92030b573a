// Vector math shared by the cpu kernels: exp, erfc, sigmoid-style helpers and horizontal
// reductions on 16-float AVX-512 registers, plus the scalar forms used when AVX-512 is
// absent. Inline and header-only so every kernel gets them without a call.
// NOTE: the vector and scalar forms agree to a few ulp, not bit for bit; tests compare both
// against double-precision references, never against each other. Nothing here allocates,
// branches on data, or touches global state.
#pragma once

#include <cmath>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace prism::cpu {

// The NR/Chebyshev form of erfc: erfc(z) ~= t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2), with
// fractional error below 1.2e-7 for every z >= 0 (Numerical Recipes, erfcc). Relative, not
// absolute, accuracy is what GELU needs for negative inputs, where 0.5 * erfc is tiny.
inline constexpr float kErfcCoeffs[10] = {-1.26551223f, 1.00002368f, 0.37409196f,  0.09678418f,
                                          -0.18628806f, 0.27886807f, -1.13520398f, 1.48851587f,
                                          -0.82215223f, 0.17087277f};

// Scalar forms: the fallback when AVX-512 is absent.
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

#ifdef __AVX512F__

// exp(x), within ~1 ulp over the float range; 0 below ~-103.3 (the last denormal), inf above
// ~88.7, NaN in gives NaN out.
// NOTE: x = n ln2 + r with |r| <= ln2 / 2; e^r by its degree-7 Taylor polynomial (truncation
// 5e-9 relative); scalef applies 2^n, so overflow and underflow saturate without a branch.
inline __m512 exp512(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so n * ln2_hi is exact for |n| < 2^9.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  __m512 y = _mm512_scalef_ps(p, n);
  // Below the clamp the true value is under half the smallest denormal: exactly 0, as
  // std::exp gives (softmax over a -inf mask relies on it).
  y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_NLE_UQ), y);
  // min/max dropped NaNs; put them back.
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// 1 / d for finite d >= 1 within ~1 ulp: the 14-bit estimate plus one Newton step (error
// squared to ~2^-28) is about twice as fast as a full vdivps on 512-bit registers.
inline __m512 recip512(__m512 d) {
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r, r);
}

// 1 / (1 + exp(-x)), accurate in relative terms on both tails. Below x ~ -87 the true value
// is under 1e-38; the cap on 1 + exp(-x) (which keeps the Newton step away from inf * 0)
// returns 1e-38 there instead.
inline __m512 sigmoid512(__m512 x) {
  const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return recip512(_mm512_min_ps(_mm512_add_ps(_mm512_set1_ps(1.0f), e), _mm512_set1_ps(1e38f)));
}

// erfc(z) for z >= 0 given z and z^2 as the unevaluated sum z2_hi + z2_lo (the low part keeps
// exp(-z^2) accurate for large z, where rounding z^2 would cost ~z^2 * 6e-8 relative).
inline __m512 erfc_nonneg512(__m512 z, __m512 z2_hi, __m512 z2_lo) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = recip512(_mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), one));
  __m512 p = _mm512_set1_ps(kErfcCoeffs[9]);
  for (int i = 8; i >= 0; --i) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kErfcCoeffs[i]));
  const __m512 e = exp512(_mm512_sub_ps(p, z2_hi));
  // exp(-z2_lo) ~= 1 - z2_lo: |z2_lo| < 2^-24 z^2, tiny.
  return _mm512_mul_ps(_mm512_mul_ps(t, e), _mm512_fnmadd_ps(z2_lo, one, one));
}

// Phi(x) = 0.5 * erfc(-x / sqrt 2), relative error ~2e-7 on both tails (GELU erf form).
inline __m512 normal_cdf512(__m512 x) {
  // Past |x| = 20 the tail underflows to 0; the clamp also keeps x^2 finite.
  const __m512 ax = _mm512_min_ps(_mm512_abs_ps(x), _mm512_set1_ps(20.0f));
  // z^2 = x^2 / 2 exactly as hi + lo (the halving is exact): no rounding of x / sqrt 2 there.
  const __m512 x2 = _mm512_mul_ps(ax, ax);
  const __m512 x2_lo = _mm512_fmsub_ps(ax, ax, x2);
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 z = _mm512_mul_ps(ax, _mm512_set1_ps(0.70710678118654752f));
  const __m512 tail = _mm512_mul_ps(
      half, erfc_nonneg512(z, _mm512_mul_ps(x2, half), _mm512_mul_ps(x2_lo, half)));
  // x >= 0: 1 - tail; x < 0: tail.
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), tail), neg, tail);
}

inline __m512 gelu_erf512(__m512 x) { return _mm512_mul_ps(x, normal_cdf512(x)); }
inline __m512 gelu_tanh512(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u2 = _mm512_mul_ps(_mm512_fmadd_ps(x3, _mm512_set1_ps(kGeluTanhCubic), x),
                                  _mm512_set1_ps(2.0f * kSqrt2OverPi));
  return _mm512_mul_ps(x, sigmoid512(u2));
}
inline __m512 silu512(__m512 x) { return _mm512_mul_ps(x, sigmoid512(x)); }

inline float hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }
inline float hmax512(__m512 v) { return _mm512_reduce_max_ps(v); }

// Mask of the first n (<= 16) lanes, for loop tails.
inline __mmask16 tail_mask(int64_t n) { return __mmask16((1u << n) - 1u); }

#endif  // __AVX512F__

}  // namespace prism::cpu

// runtime/cpu/kernels/pointwise.cpp: the kernels of pointwise_kernels.h for one tier (compiled
// once per tier). Whole vectors with plain loads and stores, then one masked tail (AVX2's
// masked stores are slow, so only the tail pays for one); a tail of 16-bit or 8-bit elements,
// which simd.h widens a whole vector at a time, goes through a zero-padded copy instead of
// reading past the end.
#include <cstring>

#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/kernels/vec_math.h"
#include "runtime/cpu/pointwise_kernels.h"

namespace prism::cpu::PRISM_TIER {
namespace {

// ---- activations ----

template <ops::Activation kAct, bool kMul>
void map(const float* x, const float* mul, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec v = activate(load(x + i), kAct);
    if constexpr (kMul) v = v * load(mul + i);
    store(y + i, v);
  }
  if (i < n) {
    Vec v = activate(load_n(x + i, n - i), kAct);
    if constexpr (kMul) v = v * load_n(mul + i, n - i);
    store_n(y + i, v, n - i);
  }
}

template <ops::Activation kAct>
void map(const float* x, const float* mul, float* y, int64_t n) {
  if (mul) map<kAct, true>(x, mul, y, n);
  else map<kAct, false>(x, mul, y, n);
}

void activate_range(const float* x, const float* mul, float* y, int64_t n, ops::Activation act) {
  switch (act) {
    case ops::Activation::none: return map<ops::Activation::none>(x, mul, y, n);
    case ops::Activation::relu: return map<ops::Activation::relu>(x, mul, y, n);
    case ops::Activation::gelu_erf: return map<ops::Activation::gelu_erf>(x, mul, y, n);
    case ops::Activation::gelu_tanh: return map<ops::Activation::gelu_tanh>(x, mul, y, n);
    case ops::Activation::silu: return map<ops::Activation::silu>(x, mul, y, n);
    case ops::Activation::quick_gelu: return map<ops::Activation::quick_gelu>(x, mul, y, n);
  }
}

// ---- add, mul ----

// y[i] = a[i or 0] op b[i or 0]: kRowA / kRowB say which operands are rows (else one value).
template <bool kAdd, bool kRowA, bool kRowB>
void binary(const float* a, const float* b, float* y, int64_t n) {
  const auto op = [](Vec p, Vec q) { return kAdd ? p + q : p * q; };
  const Vec a0 = kRowA ? zero() : splat(*a), b0 = kRowB ? zero() : splat(*b);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    store(y + i, op(kRowA ? load(a + i) : a0, kRowB ? load(b + i) : b0));
  if (i < n) store_n(y + i, op(kRowA ? load_n(a + i, n - i) : a0, kRowB ? load_n(b + i, n - i) : b0), n - i);
}

template <bool kAdd>
void binary(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  if (sa && sb) binary<kAdd, true, true>(a, b, y, n);
  else if (sa) binary<kAdd, true, false>(a, b, y, n);
  else if (sb) binary<kAdd, false, true>(a, b, y, n);
  else binary<kAdd, false, false>(a, b, y, n);
}

void add(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  binary<true>(a, sa, b, sb, y, n);
}
void mul(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  binary<false>(a, sa, b, sb, y, n);
}

// ---- conversions ----

// y = widen(x) over n elements of a 16-bit float type: load_bf16 or load_f16.
template <class T, Vec (*kWiden)(const T*)>
void widen_row(const T* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(y + i, kWiden(x + i));
  if (i < n) {
    T tail[kLanes] = {};
    std::memcpy(tail, x + i, size_t(n - i) * sizeof(T));
    store_n(y + i, kWiden(tail), n - i);
  }
}

void bf16_to_f32(const bf16* x, float* y, int64_t n) { widen_row<bf16, load_bf16>(x, y, n); }
void f16_to_f32(const f16* x, float* y, int64_t n) { widen_row<f16, load_f16>(x, y, n); }

// Clamped in float before the conversion: max(NaN, -127) is -127, and the int32 conversion
// (round half to even under the default MXCSR) never sees a value it cannot represent.
void quantize_i8(const float* x, float inv_scale, int8_t* q, int64_t n) {
  const Vec s = splat(inv_scale), lo = splat(-127.0f), hi = splat(127.0f);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store_i8_n(q + i, min(max(load(x + i) * s, lo), hi), kLanes);
  if (i < n) store_i8_n(q + i, min(max(load_n(x + i, n - i) * s, lo), hi), n - i);
}

void requantize_i8(int8_t* q, float ratio, int64_t n) {
  const Vec r = splat(ratio);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store_i8_n(q + i, load_i8(q + i) * r, kLanes);
  if (i < n) {
    int8_t tail[kLanes] = {};
    std::memcpy(tail, q + i, size_t(n - i));
    store_i8_n(q + i, load_i8(tail) * r, n - i);
  }
}

}  // namespace

extern const PointwiseKernels kPointwiseKernels = {
    .activate = activate_range,
    .add = add,
    .mul = mul,
    .bf16_to_f32 = bf16_to_f32,
    .f16_to_f32 = f16_to_f32,
    .quantize_i8 = quantize_i8,
    .requantize_i8 = requantize_i8,
};

}  // namespace prism::cpu::PRISM_TIER

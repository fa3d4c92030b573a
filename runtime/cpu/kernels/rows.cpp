// runtime/cpu/kernels/rows.cpp: the row kernels of row_kernels.h for one tier (compiled once
// per tier). Each pass reads the row in whole vectors plus one masked tail (never past the
// end); two accumulators in the sums of the norms hide the add latency.
#include <cmath>

#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/kernels/vec_math.h"
#include "runtime/cpu/row_kernels.h"

namespace prism::cpu::PRISM_TIER {
namespace {

// A step used for whole vectors and for the tail (`..._at<kTail>`) takes its operands by
// value: a lambda capturing by reference makes the compiler reload its captures after every
// store.

// sum(x - c)
float row_sum(const float* x, int64_t h, float c) {
  const Vec vc = splat(c);
  Vec a0 = zero(), a1 = zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= h; i += 2 * kLanes) {
    a0 = a0 + (load(x + i) - vc);
    a1 = a1 + (load(x + i + kLanes) - vc);
  }
  for (; i < h; i += kLanes) a0 = a0 + zero_unless(first_n(h - i), load_n(x + i, h - i) - vc);
  return reduce_add(a0 + a1);
}

// sum((x - c)^2)
float row_sq_sum(const float* x, int64_t h, float c) {
  const Vec vc = splat(c);
  Vec a0 = zero(), a1 = zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= h; i += 2 * kLanes) {
    const Vec d0 = load(x + i) - vc, d1 = load(x + i + kLanes) - vc;
    a0 = fma(d0, d0, a0);
    a1 = fma(d1, d1, a1);
  }
  for (; i < h; i += kLanes) {
    const Vec d = zero_unless(first_n(h - i), load_n(x + i, h - i) - vc);
    a0 = fma(d, d, a0);
  }
  return reduce_add(a0 + a1);
}

// y = (x - c) * s * w + b (b may be null), elements [i, i + n).
template <bool kTail, bool kBias>
void row_scale_at(const float* x, float* y, const float* w, const float* b, int64_t i, int64_t n, Vec c, Vec s) {
  const Vec v = (load_part<kTail>(x + i, n) - c) * s;
  store_part<kTail>(y + i, fma(v, load_part<kTail>(w + i, n), kBias ? load_part<kTail>(b + i, n) : zero()), n);
}

template <bool kBias>
void row_scale(const float* x, float* y, int64_t h, Vec c, Vec s, const float* w, const float* b) {
  int64_t i = 0;
  for (; i + kLanes <= h; i += kLanes) row_scale_at<false, kBias>(x, y, w, b, i, kLanes, c, s);
  if (i < h) row_scale_at<true, kBias>(x, y, w, b, i, h - i, c, s);
}

void row_scale(const float* x, float* y, int64_t h, float c, float s, const float* w, const float* b) {
  if (b) row_scale<true>(x, y, h, splat(c), splat(s), w, b);
  else row_scale<false>(x, y, h, splat(c), splat(s), w, b);
}

void layer_norm(const float* x, float* y, int64_t h, const float* w, const float* b, float eps) {
  // Shifted by x[0]: the mean of values far from 0 keeps its low digits.
  const float mean = x[0] + row_sum(x, h, x[0]) / float(h);
  const float var = row_sq_sum(x, h, mean) / float(h);
  row_scale(x, y, h, mean, 1.0f / std::sqrt(var + eps), w, b);
}

void rms_norm(const float* x, float* y, int64_t h, const float* w, float eps) {
  const float ms = row_sq_sum(x, h, 0.0f) / float(h);
  row_scale(x, y, h, 0.0f, 1.0f / std::sqrt(ms + eps), w, nullptr);
}

template <bool kTail>
void add_scaled_at(float* x, const float* y, const float* w, int64_t i, int64_t n, Vec s) {
  const Vec v = (load_part<kTail>(y + i, n) - zero()) * s;  // row_scale_at's steps, then the add
  store_part<kTail>(x + i, load_part<kTail>(x + i, n) + fma(v, load_part<kTail>(w + i, n), zero()), n);
}

void add_rms_norm(float* x, const float* y, int64_t h, const float* w, float eps) {
  const Vec s = splat(1.0f / std::sqrt(row_sq_sum(y, h, 0.0f) / float(h) + eps));
  int64_t i = 0;
  for (; i + kLanes <= h; i += kLanes) add_scaled_at<false>(x, y, w, i, kLanes, s);
  if (i < h) add_scaled_at<true>(x, y, w, i, h - i, s);
}

// acc = exp(x - m) summed into acc, y = exp(x - m).
template <bool kTail>
Vec exp_sum_at(const float* x, float* y, int64_t n, Vec m, Vec acc) {
  const Vec e = exp(load_part<kTail>(x, n) - m);
  store_part<kTail>(y, e, n);
  return acc + (kTail ? zero_unless(first_n(n), e) : e);
}

template <bool kTail>
void scale_at(float* y, int64_t n, Vec s) {
  store_part<kTail>(y, load_part<kTail>(y, n) * s, n);
}

void softmax(const float* x, float* y, int64_t h) {
  Vec mx = splat(-INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= h; i += kLanes) mx = max(mx, load(x + i));
  if (i < h) mx = select(first_n(h - i), max(mx, load_n(x + i, h - i)), mx);
  const Vec vm = splat(reduce_max(mx));
  Vec acc = zero();
  for (i = 0; i + kLanes <= h; i += kLanes) acc = exp_sum_at<false>(x + i, y + i, kLanes, vm, acc);
  if (i < h) acc = exp_sum_at<true>(x + i, y + i, h - i, vm, acc);
  const Vec inv = splat(1.0f / reduce_add(acc));
  for (i = 0; i + kLanes <= h; i += kLanes) scale_at<false>(y + i, kLanes, inv);
  if (i < h) scale_at<true>(y + i, h - i, inv);
}

float row_max(const float* x, int64_t n) {
  Vec acc = splat(-INFINITY);
  int64_t i = 0;
  // max(v, acc) is acc where v is NaN: NaNs never win.
  for (; i + kLanes <= n; i += kLanes) acc = max(load(x + i), acc);
  if (i < n) acc = select(first_n(n - i), max(load_n(x + i, n - i), acc), acc);
  return reduce_max(acc);
}

float row_absmax(const float* x, int64_t n) {
  Vec acc = zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = max(acc, abs(load(x + i)));
  // The masked tail loads zeros, which cannot raise the max.
  if (i < n) acc = max(acc, abs(load_n(x + i, n - i)));
  return reduce_max(acc);
}

// The first lane of `hits` at or after element i, or n.
template <class Compare>
int64_t find_first(const float* x, int64_t n, float value, Compare hit) {
  const Vec v = splat(value);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    if (const uint32_t m = bits(hit(load(x + i), v))) return i + __builtin_ctz(m);
  if (i < n)
    if (const uint32_t m = bits(hit(load_n(x + i, n - i), v) & first_n(n - i))) return i + __builtin_ctz(m);
  return n;
}

int64_t find_equal(const float* x, int64_t n, float value) {
  return find_first(x, n, value, [](Vec a, Vec b) { return a == b; });
}

int64_t find_above(const float* x, int64_t n, float threshold) {
  return find_first(x, n, threshold, [](Vec a, Vec b) { return a > b; });
}

template <bool kTail>
void exp_shifted_at(const float* x, float* y, int64_t n, Vec s) {
  const Vec e = exp(load_part<kTail>(x, n) - s);
  store_part<kTail>(y, select(is_nan(e), zero(), e), n);
}

void exp_shifted(const float* x, float* y, int64_t n, float shift) {
  const Vec s = splat(shift);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) exp_shifted_at<false>(x + i, y + i, kLanes, s);
  if (i < n) exp_shifted_at<true>(x + i, y + i, n - i, s);
}

// The sum of 16 floats (the missing ones of a short block read as 0) in the order of an
// AVX-512 register's horizontal sum: on AVX2 the add of the two halves is its first step.
float block_sum(const float* x, int64_t n) {
#if defined(__AVX512F__)
  return reduce_add(load_n(x, n));
#else
  static_assert(2 * kLanes == kRowSumBlock);
  return reduce_add(load_n(x, n) + (n > kLanes ? load_n(x + kLanes, n - kLanes) : zero()));
#endif
}

double block_sums(const float* x, int64_t n, float* sums) {
  double total = 0;
  for (int64_t i = 0; i < n; i += kRowSumBlock) {
    const float s = block_sum(x + i, n - i);
    *sums++ = s;
    total += s;
  }
  return total;
}

}  // namespace

extern const RowKernels kRowKernels = {
    .layer_norm = layer_norm,
    .rms_norm = rms_norm,
    .add_rms_norm = add_rms_norm,
    .softmax = softmax,
    .max = row_max,
    .absmax = row_absmax,
    .find_equal = find_equal,
    .find_above = find_above,
    .exp_shifted = exp_shifted,
    .block_sums = block_sums,
};

}  // namespace prism::cpu::PRISM_TIER

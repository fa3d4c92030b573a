// runtime/cpu/kernels/rope.cpp: the kernels of rope_kernels.h for one tier (compiled once per
// tier). Each product is one fma over a rounded product (x1 c - round(x2 s)), the same on every
// tier; loop tails are masked loads and stores.
#include <cmath>

#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/rope_kernels.h"

namespace prism::cpu::PRISM_TIER {
namespace {

template <bool kTail>
void rotate_half_at(float* x, const float* c, const float* s, int64_t half, int64_t i) {
  const int64_t n = half - i;
  const Vec x1 = load_part<kTail>(x + i, n), x2 = load_part<kTail>(x + half + i, n);
  const Vec vc = load_part<kTail>(c + i, n), vs = load_part<kTail>(s + i, n);
  store_part<kTail>(x + i, fms(x1, vc, x2 * vs), n);
  store_part<kTail>(x + half + i, fma(x2, vc, x1 * vs), n);
}

void rotate_half(float* x, const float* c, const float* s, int64_t half) {
  int64_t i = 0;
  for (; i + kLanes <= half; i += kLanes) rotate_half_at<false>(x, c, s, half, i);
  if (i < half) rotate_half_at<true>(x, c, s, half, i);
}

// kLanes / 2 pairs per register: cos/sin lanes duplicated to (i, i); fmaddsub gives
// even = x0 c - x1 s, odd = x1 c + x0 s with x swapped within pairs as the addend's source.
template <bool kTail>
void rotate_pairs_at(float* x, const float* c, const float* s, int64_t half, int64_t i) {
  constexpr int64_t kPairs = kLanes / 2;
  const int64_t np = kTail ? half - i : kPairs;
  const Vec vx = load_part<kTail>(x + 2 * i, 2 * np);
  const Vec vc = load_duplicated_n(c + i, np), vs = load_duplicated_n(s + i, np);
  store_part<kTail>(x + 2 * i, fmaddsub(vx, vc, swap_pairs(vx) * vs), 2 * np);
}

void rotate_pairs(float* x, const float* c, const float* s, int64_t half) {
  constexpr int64_t kPairs = kLanes / 2;
  int64_t i = 0;
  for (; i + kPairs <= half; i += kPairs) rotate_pairs_at<false>(x, c, s, half, i);
  if (i < half) rotate_pairs_at<true>(x, c, s, half, i);
}

// ---- RMSNorm fused with the rotation (ops::rms_norm_rope_) ----
// NOTE: the sums, the scale and the weight product are rows.cpp's rms_norm step for step
// (two accumulators over 2 kLanes, one masked tail, 1 / sqrt(ms + eps), fma(x s, w, 0)), and
// the rotation is the one above on the normed values, so the fused op gives the same bits
// as rms_norm followed by apply_rope on every tier; only the round trip through memory goes.

float head_sq_sum(const float* x, int64_t d) {
  Vec a0 = zero(), a1 = zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= d; i += 2 * kLanes) {
    const Vec d0 = load(x + i) - zero(), d1 = load(x + i + kLanes) - zero();
    a0 = fma(d0, d0, a0);
    a1 = fma(d1, d1, a1);
  }
  for (; i < d; i += kLanes) {
    const Vec v = zero_unless(first_n(d - i), load_n(x + i, d - i) - zero());
    a0 = fma(v, v, a0);
  }
  return reduce_add(a0 + a1);
}

// The normed values of elements [i, i + n) (n <= kLanes when kTail).
template <bool kTail>
Vec normed_at(const float* x, const float* w, int64_t i, int64_t n, Vec inv) {
  return fma((load_part<kTail>(x + i, n) - zero()) * inv, load_part<kTail>(w + i, n), zero());
}

// Elements [from, d) normed without rotation (a head longer than its rotary dims).
void norm_tail(float* x, int64_t from, int64_t d, const float* w, Vec inv) {
  int64_t i = from;
  for (; i + kLanes <= d; i += kLanes) store(x + i, normed_at<false>(x, w, i, kLanes, inv));
  if (i < d) store_n(x + i, normed_at<true>(x, w, i, d - i, inv), d - i);
}

template <bool kTail>
void norm_rotate_half_at(float* x, const float* w, const float* c, const float* s, int64_t half, int64_t i, Vec inv) {
  const int64_t n = half - i;
  const Vec x1 = normed_at<kTail>(x, w, i, n, inv), x2 = normed_at<kTail>(x, w, half + i, n, inv);
  const Vec vc = load_part<kTail>(c + i, n), vs = load_part<kTail>(s + i, n);
  store_part<kTail>(x + i, fms(x1, vc, x2 * vs), n);
  store_part<kTail>(x + half + i, fma(x2, vc, x1 * vs), n);
}

void rms_norm_rotate_half(float* x, int64_t d, const float* w, float eps, const float* c, const float* s,
                          int64_t half) {
  const Vec inv = splat(1.0f / std::sqrt(head_sq_sum(x, d) / float(d) + eps));
  int64_t i = 0;
  for (; i + kLanes <= half; i += kLanes) norm_rotate_half_at<false>(x, w, c, s, half, i, inv);
  if (i < half) norm_rotate_half_at<true>(x, w, c, s, half, i, inv);
  norm_tail(x, 2 * half, d, w, inv);
}

template <bool kTail>
void norm_rotate_pairs_at(float* x, const float* w, const float* c, const float* s, int64_t half, int64_t i,
                          Vec inv) {
  constexpr int64_t kPairs = kLanes / 2;
  const int64_t np = kTail ? half - i : kPairs;
  const Vec vx = normed_at<kTail>(x, w, 2 * i, 2 * np, inv);
  const Vec vc = load_duplicated_n(c + i, np), vs = load_duplicated_n(s + i, np);
  store_part<kTail>(x + 2 * i, fmaddsub(vx, vc, swap_pairs(vx) * vs), 2 * np);
}

void rms_norm_rotate_pairs(float* x, int64_t d, const float* w, float eps, const float* c, const float* s,
                           int64_t half) {
  constexpr int64_t kPairs = kLanes / 2;
  const Vec inv = splat(1.0f / std::sqrt(head_sq_sum(x, d) / float(d) + eps));
  int64_t i = 0;
  for (; i + kPairs <= half; i += kPairs) norm_rotate_pairs_at<false>(x, w, c, s, half, i, inv);
  if (i < half) norm_rotate_pairs_at<true>(x, w, c, s, half, i, inv);
  norm_tail(x, 2 * half, d, w, inv);
}

}  // namespace

extern const RopeKernels kRopeKernels = {
    .rotate_half = rotate_half,
    .rotate_pairs = rotate_pairs,
    .rms_norm_rotate_half = rms_norm_rotate_half,
    .rms_norm_rotate_pairs = rms_norm_rotate_pairs,
};

}  // namespace prism::cpu::PRISM_TIER

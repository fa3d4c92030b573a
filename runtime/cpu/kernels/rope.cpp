// runtime/cpu/kernels/rope.cpp: the kernels of rope_kernels.h for one tier (compiled once per
// tier). Each product is one fma over a rounded product (x1 c - round(x2 s)), the same on every
// tier; loop tails are masked loads and stores.
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

}  // namespace

extern const RopeKernels kRopeKernels = {
    .rotate_half = rotate_half,
    .rotate_pairs = rotate_pairs,
};

}  // namespace prism::cpu::PRISM_TIER

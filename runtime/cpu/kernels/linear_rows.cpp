// runtime/cpu/kernels/linear_rows.cpp: LinearRowKernels (linear_kernels.h) for one tier: the
// passes over one row of activations before a GEMM (bf16 rounding, s8 quantisation) and over
// rows of oneDNN's int8 output after it (the epilogue). linear.cpp threads them. Whole vectors
// plus one masked tail; no scalar helper from outside the tier's namespace (an inline function
// with external linkage compiled here could be the copy the linker keeps for AVX2 code).
#include "runtime/cpu/kernels/simd.h"
#include "runtime/cpu/kernels/vec_math.h"
#include "runtime/cpu/linear_kernels.h"

namespace prism::cpu::PRISM_TIER {
namespace {

void to_bf16(const float* x, int64_t k, bf16* out) {
  int64_t i = 0;
#if defined(__AVX512BF16__)
  for (; i < k; i += 16) {
    const __mmask16 m = first_n(k - i).m;
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(out + i, m, reinterpret_cast<const __m256i&>(v));
  }
#else
  for (; i < k; i += kLanes) store_bf16_n(out + i, load_n(x + i, k - i), k - i);
#endif
}

float quantize_s8(const float* x, int64_t k, int8_t* out) {
  Vec vmax = zero();
  for (int64_t i = 0; i < k; i += kLanes) vmax = max(vmax, abs(load_n(x + i, k - i)));  // masked lanes read 0
  const float amax = reduce_max(vmax);
  const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  const Vec inv = splat(amax > 0.0f ? 127.0f / amax : 0.0f);
  // NOTE: store_i8_n rounds half to even (cvtps under the default MXCSR, like nearbyint);
  // |x * inv| <= 127 up to the rounding of inv, so the saturating narrow never bites.
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) store_i8_n(out + i, load(x + i) * inv, kLanes);
  if (i < k) store_i8_n(out + i, load_n(x + i, k - i) * inv, k - i);
  return scale;
}

// The epilogue on rows [m0, m1) with the activation and the bias test fixed at compile time.
// NOTE (speed): measured at M = 4096 on Zen 4 (AVX-512, the old one-vector loop vs four
// vectors per step, outputs bit-identical): the epilogue alone went from 3.7 to 1.2-1.4 ms at
// N = 768 (no activation) and from 22-32 to 14-16 ms at N = 3072 with GELU(erf), where it had
// cost about as much as the s8 GEMM itself. Each vector's activation is one ~35-op dependency
// chain, so independent vectors per step let the out-of-order core overlap them, and the
// activation switch and the bias test are out of the loop. End to end (linear_bench):
// 768->768 74% -> 82% of the 1024^3 peak, 768->3072 + GELU 48% -> 55%. AVX2 has half the
// registers for twice the vectors per row: two per step there.
#if defined(__AVX512F__)
constexpr int kUnroll = 4;
#else
constexpr int kUnroll = 2;
#endif

template <ops::Activation kAct, bool kBias>
void epilogue_rows(float* y, int64_t m0, int64_t m1, int64_t n, const float* sx, const float* bias) {
  for (int64_t m = m0; m < m1; ++m) {
    float* row = y + m * n;
    const Vec s = splat(sx[m]);
    int64_t j = 0;
    for (; j + kUnroll * kLanes <= n; j += kUnroll * kLanes) {
      Vec v[kUnroll];
      for (int u = 0; u < kUnroll; ++u) {
        const Vec a = load(row + j + u * kLanes);
        v[u] = kBias ? fma(a, s, load(bias + j + u * kLanes)) : a * s;
      }
      for (int u = 0; u < kUnroll; ++u) store(row + j + u * kLanes, activate(v[u], kAct));
    }
    for (; j < n; j += kLanes) {
      const Vec a = load_n(row + j, n - j);
      const Vec v = kBias ? fma(a, s, load_n(bias + j, n - j)) : a * s;
      store_n(row + j, activate(v, kAct), n - j);
    }
  }
}

template <ops::Activation kAct>
void epilogue_act(float* y, int64_t m0, int64_t m1, int64_t n, const float* sx, const float* bias) {
  if (bias)
    epilogue_rows<kAct, true>(y, m0, m1, n, sx, bias);
  else
    epilogue_rows<kAct, false>(y, m0, m1, n, sx, bias);
}

void int8_epilogue(float* y, int64_t m0, int64_t m1, int64_t n, const float* sx, const float* bias,
                   ops::Activation act) {
  using A = ops::Activation;
  switch (act) {
    case A::none: return epilogue_act<A::none>(y, m0, m1, n, sx, bias);
    case A::relu: return epilogue_act<A::relu>(y, m0, m1, n, sx, bias);
    case A::gelu_erf: return epilogue_act<A::gelu_erf>(y, m0, m1, n, sx, bias);
    case A::gelu_tanh: return epilogue_act<A::gelu_tanh>(y, m0, m1, n, sx, bias);
    case A::silu: return epilogue_act<A::silu>(y, m0, m1, n, sx, bias);
    case A::quick_gelu: return epilogue_act<A::quick_gelu>(y, m0, m1, n, sx, bias);
  }
}

}  // namespace

extern const LinearRowKernels kLinearRowKernels = {
    .to_bf16 = to_bf16,
    .quantize_s8 = quantize_s8,
    .int8_epilogue = int8_epilogue,
};

}  // namespace prism::cpu::PRISM_TIER

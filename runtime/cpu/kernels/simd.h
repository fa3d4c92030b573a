// runtime/cpu/kernels/simd.h: the float vector of the tier a kernel file is compiled for, and
// the few operations the kernels need. Every file under runtime/cpu/kernels/ is compiled once
// per tier (CMakeLists.txt: PRISM_TIER=avx2 with -mavx2 -mfma -mf16c, PRISM_TIER=avx512 with
// -march=x86-64-v4), so one source gives Vec of 8 lanes (__m256) or 16 lanes (__m512).
// Must not: be included outside runtime/cpu/kernels/, or declare anything outside the tier's
// namespace: two tiers' copies of an inline function with external linkage could be merged
// by the linker, and the AVX-512 one would then run on an AVX2-only CPU.
// NOTE: AVX2 has no mask registers; a Mask there is a vector of all-ones / all-zeros lanes.
// Partial loads and stores (the first n lanes) are masked moves on both tiers, never a read
// past the end.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "runtime/dtype.h"

#ifndef PRISM_TIER
#error "runtime/cpu/kernels/ files are compiled once per tier, with PRISM_TIER set"
#endif

namespace prism::cpu::PRISM_TIER {

#if defined(__AVX512F__)

inline constexpr int kLanes = 16;
struct Vec {
  __m512 v;
};
struct Mask {
  __mmask16 m;
};

inline Vec zero() { return {_mm512_setzero_ps()}; }
inline Vec splat(float x) { return {_mm512_set1_ps(x)}; }
inline Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline Vec load_aligned(const float* p) { return {_mm512_load_ps(p)}; }
inline void store(float* p, Vec a) { _mm512_storeu_ps(p, a.v); }
inline void store_aligned(float* p, Vec a) { _mm512_store_ps(p, a.v); }
inline Mask first_n(int64_t n) {
  return {n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u)};
}
inline Vec load_n(const float* p, int64_t n) { return {_mm512_maskz_loadu_ps(first_n(n).m, p)}; }
inline void store_n(float* p, Vec a, int64_t n) { _mm512_mask_storeu_ps(p, first_n(n).m, a.v); }

inline Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }    // a b + c
inline Vec fms(Vec a, Vec b, Vec c) { return {_mm512_fmsub_ps(a.v, b.v, c.v)}; }    // a b - c
inline Vec fnma(Vec a, Vec b, Vec c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c - a b
inline Vec fmaddsub(Vec a, Vec b, Vec c) { return {_mm512_fmaddsub_ps(a.v, b.v, c.v)}; }  // even: a b - c, odd: a b + c
inline Vec max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
inline Vec min(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
inline Vec abs(Vec a) { return {_mm512_abs_ps(a.v)}; }
inline Vec round_even(Vec a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// 1 / d for finite d >= 1 within ~1 ulp: the 14-bit estimate plus one Newton step (error
// squared to ~2^-28) is about twice as fast as a full vdivps on 512-bit registers.
inline Vec reciprocal(Vec d) {
  const __m512 r = _mm512_rcp14_ps(d.v);
  return {_mm512_fmadd_ps(_mm512_fnmadd_ps(d.v, r, _mm512_set1_ps(1.0f)), r, r)};
}
// p * 2^n for integral n (as float), saturating to 0 / inf like an exact multiply.
inline Vec scale_by_pow2(Vec p, Vec n) { return {_mm512_scalef_ps(p.v, n.v)}; }

inline float reduce_add(Vec a) { return _mm512_reduce_add_ps(a.v); }
inline float reduce_max(Vec a) { return _mm512_reduce_max_ps(a.v); }

inline Mask operator<(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
inline Mask operator>(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)}; }
inline Mask operator==(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_EQ_OQ)}; }
inline Mask not_le(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_NLE_UQ)}; }  // !(a <= b): NaN true
inline Mask is_nan(Vec a) { return {_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)}; }
inline Mask operator&(Mask a, Mask b) { return {__mmask16(a.m & b.m)}; }
inline Mask operator|(Mask a, Mask b) { return {__mmask16(a.m | b.m)}; }
// Lane i of the result: m ? a : b.
inline Vec select(Mask m, Vec a, Vec b) { return {_mm512_mask_mov_ps(b.v, m.m, a.v)}; }
inline Vec zero_unless(Mask m, Vec a) { return {_mm512_maskz_mov_ps(m.m, a.v)}; }
inline uint32_t bits(Mask m) { return m.m; }  // bit i: lane i

// Widening loads of kLanes elements, and the narrowing store of rounded lanes to int8.
inline Vec load_bf16(const bf16* p) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16))};
}
inline Vec load_f16(const f16* p) { return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))}; }
// 2 kLanes bf16 at p, widened without a shuffle: lo lane i = p[2i], hi lane i = p[2i + 1].
inline void load_bf16_pairs(const bf16* p, Vec& lo, Vec& hi) {
  const __m512i v = _mm512_loadu_si512(p);
  lo = {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16))};
  hi = {_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))))};
}
// The first n lanes of a rounded to bf16, nearest even, NaN kept quiet (as f32_to_bf16).
inline void store_bf16_n(bf16* p, Vec a, int64_t n) {
  const __m512i u = _mm512_castps_si512(a.v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q), _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
  _mm256_mask_storeu_epi16(p, first_n(n).m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
}
inline Vec load_i8(const int8_t* p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
// The first n lanes of round_half_even(a) (|a| <= 127 expected), saturated to int8.
inline void store_i8_n(int8_t* p, Vec a, int64_t n) {
  _mm512_mask_cvtsepi32_storeu_epi8(p, first_n(n).m, _mm512_cvtps_epi32(a.v));
}

// Lanes (2i, 2i + 1) swapped.
inline Vec swap_pairs(Vec a) { return {_mm512_permute_ps(a.v, 0xB1)}; }
// kLanes / 2 floats at p, each twice: (p0, p0, p1, p1, ...); reads only kLanes / 2 floats.
inline Vec load_duplicated_n(const float* p, int64_t n) {
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __mmask8 m = n >= 8 ? __mmask8(0xff) : __mmask8((1u << n) - 1u);
  return {_mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(m, p)))};
}

// r[i] = row i of a kLanes x kLanes block; afterwards r[c] = column c.
inline void transpose(Vec r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i].v, r[2 * i + 1].v);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i].v, r[2 * i + 1].v);
  }
  // u[4b + c] holds, per 128-bit lane L, column 4L + c of rows 4b..4b+3.
  for (int b = 0; b < 4; ++b) {
    const __m512d t0 = _mm512_castps_pd(t[4 * b]), t1 = _mm512_castps_pd(t[4 * b + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * b + 2]), t3 = _mm512_castps_pd(t[4 * b + 3]);
    u[4 * b + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);  // lanes 0, 2
    const __m512 b = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);  // lanes 1, 3
    const __m512 e = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 f = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c].v = _mm512_shuffle_f32x4(a, e, 0x88);
    r[8 + c].v = _mm512_shuffle_f32x4(a, e, 0xdd);
    r[4 + c].v = _mm512_shuffle_f32x4(b, f, 0x88);
    r[12 + c].v = _mm512_shuffle_f32x4(b, f, 0xdd);
  }
}

#else  // AVX2 + FMA + F16C

inline constexpr int kLanes = 8;
struct Vec {
  __m256 v;
};
struct Mask {
  __m256 m;  // lanes all ones (true) or all zeros
};

inline Vec zero() { return {_mm256_setzero_ps()}; }
inline Vec splat(float x) { return {_mm256_set1_ps(x)}; }
inline Vec load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline Vec load_aligned(const float* p) { return {_mm256_load_ps(p)}; }
inline void store(float* p, Vec a) { _mm256_storeu_ps(p, a.v); }
inline void store_aligned(float* p, Vec a) { _mm256_store_ps(p, a.v); }
inline __m256i first_n_bits(int64_t n) {
  const int k = n >= 8 ? 8 : n <= 0 ? 0 : int(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Mask first_n(int64_t n) { return {_mm256_castsi256_ps(first_n_bits(n))}; }
inline Vec load_n(const float* p, int64_t n) { return {_mm256_maskload_ps(p, first_n_bits(n))}; }
inline void store_n(float* p, Vec a, int64_t n) { _mm256_maskstore_ps(p, first_n_bits(n), a.v); }

inline Vec operator+(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline Vec fms(Vec a, Vec b, Vec c) { return {_mm256_fmsub_ps(a.v, b.v, c.v)}; }
inline Vec fnma(Vec a, Vec b, Vec c) { return {_mm256_fnmadd_ps(a.v, b.v, c.v)}; }
inline Vec fmaddsub(Vec a, Vec b, Vec c) { return {_mm256_fmaddsub_ps(a.v, b.v, c.v)}; }
inline Vec max(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
inline Vec min(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
inline Vec abs(Vec a) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v)}; }
inline Vec round_even(Vec a) { return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// 1 / d, correctly rounded: rcp_ps is a 12-bit estimate, and one Newton step from it stays
// a few ulp off; a 256-bit divide is cheap enough next to the exp it follows.
inline Vec reciprocal(Vec d) { return {_mm256_div_ps(_mm256_set1_ps(1.0f), d.v)}; }
// p * 2^n for integral n in [-300, 300] (as float), with gradual underflow and overflow to
// inf like scalef: two exact multiplies by normal powers of two, 2^(n/2) and 2^(n - n/2).
inline Vec scale_by_pow2(Vec p, Vec n) {
  const __m256i ni = _mm256_cvtps_epi32(n.v);
  const __m256i a = _mm256_srai_epi32(ni, 1);
  const __m256i b = _mm256_sub_epi32(ni, a);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 pa = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(a, bias), 23));
  const __m256 pb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(b, bias), 23));
  return {_mm256_mul_ps(_mm256_mul_ps(p.v, pa), pb)};
}

inline float reduce_add(Vec a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(Vec a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline Mask operator<(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)}; }
inline Mask operator>(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)}; }
inline Mask operator==(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_EQ_OQ)}; }
inline Mask not_le(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_NLE_UQ)}; }
inline Mask is_nan(Vec a) { return {_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q)}; }
inline Mask operator&(Mask a, Mask b) { return {_mm256_and_ps(a.m, b.m)}; }
inline Mask operator|(Mask a, Mask b) { return {_mm256_or_ps(a.m, b.m)}; }
inline Vec select(Mask m, Vec a, Vec b) { return {_mm256_blendv_ps(b.v, a.v, m.m)}; }
inline Vec zero_unless(Mask m, Vec a) { return {_mm256_and_ps(m.m, a.v)}; }
inline uint32_t bits(Mask m) { return uint32_t(_mm256_movemask_ps(m.m)); }

inline Vec load_bf16(const bf16* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16))};
}
inline Vec load_f16(const f16* p) { return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))}; }
inline void load_bf16_pairs(const bf16* p, Vec& lo, Vec& hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16))};
  hi = {_mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))))};
}
inline void store_bf16_n(bf16* p, Vec a, int64_t n) {
  const __m256i u = _mm256_castps_si256(a.v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_or_si256(u, _mm256_set1_epi32(0x400000))),
                                           _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q)));
  // 32 -> 16 bits (values < 2^16, so the unsigned saturation never bites); packs work per
  // 128-bit half, the permute puts the two halves' results side by side.
  const __m256i h = _mm256_srli_epi32(r, 16);
  const __m128i b = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08));
  if (n >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
    return;
  }
  alignas(16) uint16_t tmp[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
  for (int64_t i = 0; i < n; ++i) p[i].bits = tmp[i];
}
inline Vec load_i8(const int8_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
}
inline void store_i8_n(int8_t* p, Vec a, int64_t n) {
  // int32 -> int16 -> int8 with signed saturation; packs work per 128-bit half.
  const __m256i q = _mm256_cvtps_epi32(a.v);
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  const __m128i b = _mm_packs_epi16(w, w);
  if (n >= 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), b);
    return;
  }
  alignas(16) int8_t tmp[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
  for (int64_t i = 0; i < n; ++i) p[i] = tmp[i];
}

inline Vec swap_pairs(Vec a) { return {_mm256_permute_ps(a.v, 0xB1)}; }
inline Vec load_duplicated_n(const float* p, int64_t n) {
  const __m128 h = _mm_maskload_ps(p, _mm256_castsi256_si128(first_n_bits(n >= 4 ? 4 : n)));
  return {_mm256_permutevar8x32_ps(_mm256_castps128_ps256(h), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))};
}

// r[i] = row i of an 8 x 8 block; afterwards r[c] = column c.
inline void transpose(Vec r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i].v, r[2 * i + 1].v);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i].v, r[2 * i + 1].v);
  }
  for (int b = 0; b < 2; ++b) {
    u[4 * b + 0] = _mm256_shuffle_ps(t[4 * b], t[4 * b + 2], 0x44);
    u[4 * b + 1] = _mm256_shuffle_ps(t[4 * b], t[4 * b + 2], 0xee);
    u[4 * b + 2] = _mm256_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0x44);
    u[4 * b + 3] = _mm256_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    r[c].v = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c].v = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

#endif

// n <= kLanes floats at p: whole vectors (kTail false) use plain loads and stores, only a
// row's tail pays for masking (AVX2's masked stores are slow). For a step written once for
// both (`..._at<kTail>`).
template <bool kTail>
Vec load_part(const float* p, int64_t n) {
  return kTail ? load_n(p, n) : load(p);
}
template <bool kTail>
void store_part(float* p, Vec v, int64_t n) {
  if constexpr (kTail) store_n(p, v, n);
  else store(p, v);
}

}  // namespace prism::cpu::PRISM_TIER

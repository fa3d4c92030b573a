// Rotary position embeddings: the inverse-frequency vector, a cos/sin table built once per
// model, and the in-place rotation of q or k heads (possibly a strided view of a fused QKV).
// NOTE: inv_freq and the table follow Hugging Face's f32 arithmetic: angle = float(pos) * inv_freq rounded to
// f32 (as its f32 outer product does), then cos/sin of that f32 angle, here in double. That
// keeps long positions, where the f32 product's rounding dominates, aligned with PyTorch.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/vec_math.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

// Half style (rotate_half): x1 = x[:r/2], x2 = x[r/2:r];
// x1' = x1 c - x2 s, x2' = x2 c + x1 s.
void rotate_half(float* x, const float* c, const float* s, int64_t half) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i < half; i += 16) {
    const __mmask16 m = half - i >= 16 ? __mmask16(0xffff) : cpu::tail_mask(half - i);
    const __m512 x1 = _mm512_maskz_loadu_ps(m, x + i), x2 = _mm512_maskz_loadu_ps(m, x + half + i);
    const __m512 vc = _mm512_maskz_loadu_ps(m, c + i), vs = _mm512_maskz_loadu_ps(m, s + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_fmsub_ps(x1, vc, _mm512_mul_ps(x2, vs)));
    _mm512_mask_storeu_ps(x + half + i, m, _mm512_fmadd_ps(x2, vc, _mm512_mul_ps(x1, vs)));
  }
#endif
  for (; i < half; ++i) {
    const float x1 = x[i], x2 = x[half + i];
    x[i] = x1 * c[i] - x2 * s[i];
    x[half + i] = x2 * c[i] + x1 * s[i];
  }
}

// Interleaved style (GPT-J): pairs (x[2i], x[2i+1]) rotate by angle i.
void rotate_pairs(float* x, const float* c, const float* s, int64_t half) {
  int64_t i = 0;
#ifdef __AVX512F__
  // 8 pairs per register: cos/sin lanes duplicated to (i, i); fmaddsub gives
  // even = x0 c - x1 s, odd = x1 c + x0 s with x swapped within pairs as the addend's source.
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  for (; i < half; i += 8) {
    const int64_t np = std::min<int64_t>(8, half - i);
    const __mmask8 m8 = __mmask8((1u << np) - 1u);
    const __mmask16 m = cpu::tail_mask(2 * np);  // 2 * np <= 16
    const __m512 vx = _mm512_maskz_loadu_ps(m, x + 2 * i);
    const __m512 vc = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(m8, c + i)));
    const __m512 vs = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(m8, s + i)));
    const __m512 swapped = _mm512_permute_ps(vx, 0xB1);  // (x1, x0) in each pair
    _mm512_mask_storeu_ps(x + 2 * i, m, _mm512_fmaddsub_ps(vx, vc, _mm512_mul_ps(swapped, vs)));
  }
#endif
  for (; i < half; ++i) {
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c[i] - x1 * s[i];
    x[2 * i + 1] = x1 * c[i] + x0 * s[i];
  }
}

}  // namespace

Tensor rope_inv_freq(int rotary_dim, double theta) {
  PRISM_CHECK_MSG(rotary_dim > 0 && rotary_dim % 2 == 0, "rope: rotary_dim must be even and positive");
  const int half = rotary_dim / 2;
  Tensor out = Tensor::empty({half}, DType::f32);  // [rotary_dim / 2] f32
  float* p = out.data<float>();
  // Hugging Face's f32 steps: exponent = f32(2i) / f32(dim), then 1 / theta^exponent in f32.
  // Matching its roundings matters: one ulp of inv_freq is ~2e-4 rad at position 4000.
  const double theta_f = float(theta);
  for (int i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(rotary_dim);
    p[i] = 1.0f / float(std::pow(theta_f, double(exponent)));
  }
  return out;
}

RopeTable make_rope_table(const Tensor& inv_freq, int64_t max_positions) {
  PRISM_CHECK_MSG(inv_freq.dtype() == DType::f32 && inv_freq.dim() == 1 && inv_freq.is_contiguous(),
                  "rope: inv_freq must be [rotary_dim / 2] f32");
  PRISM_CHECK(max_positions > 0);
  const int64_t half = inv_freq.size(0);
  RopeTable t;
  t.rotary_dim = int(2 * half);
  t.cos = Tensor::empty({max_positions, half}, DType::f32);
  t.sin = Tensor::empty({max_positions, half}, DType::f32);
  const float* f = inv_freq.data<float>();
  float* pc = t.cos.data<float>();
  float* ps = t.sin.data<float>();
  parallel_for(max_positions, std::max<int64_t>(1, 4096 / std::max<int64_t>(half, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(p) * f[i];
        pc[p * half + i] = float(std::cos(double(angle)));
        ps[p * half + i] = float(std::sin(double(angle)));
      }
  });
  return t;
}

void apply_rope(Tensor& x, const Tensor& positions, const RopeTable& table, RopeStyle style) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && x.dim() == 3 && x.stride(2) == 1,
                  "apply_rope: x must be [T, H, D] f32 with a contiguous last dim");
  PRISM_CHECK_MSG(positions.dim() == 1 && positions.size(0) == x.size(0) &&
                      (positions.dtype() == DType::i32 || positions.dtype() == DType::i64),
                  "apply_rope: positions must be [T] i32");
  const int64_t half = table.rotary_dim / 2;
  PRISM_CHECK_MSG(table.rotary_dim > 0 && table.rotary_dim <= x.size(2) && table.cos.size(1) == half,
                  "apply_rope: rotary_dim must fit in head_dim");
  const int64_t num_tokens = x.size(0), num_heads = x.size(1), max_pos = table.cos.size(0);
  const int64_t st = x.stride(0), sh = x.stride(1);
  const Tensor pos = positions.contiguous();
  const int64_t* pos64 = pos.dtype() == DType::i64 ? pos.data<int64_t>() : nullptr;
  const int32_t* pos32 = pos64 ? nullptr : pos.data<int32_t>();
  float* px = x.data<float>();
  const float* pc = table.cos.data<float>();
  const float* ps = table.sin.data<float>();
  const auto rotate = style == RopeStyle::half ? rotate_half : rotate_pairs;
  // Rows are (token, head); a chunk is ~8K rotated floats so small calls stay on one thread.
  parallel_for(num_tokens * num_heads, std::max<int64_t>(1, 4096 / half), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / num_heads, h = r % num_heads;
      const int64_t p = pos64 ? pos64[t] : pos32[t];
      PRISM_CHECK_MSG(p >= 0 && p < max_pos, "apply_rope: position outside the table");
      rotate(px + t * st + h * sh, pc + p * half, ps + p * half, half);
    }
  });
}

}  // namespace prism::ops

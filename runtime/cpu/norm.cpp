// layer_norm, rms_norm and softmax over the last dim: one row at a time, rows spread over the
// OpenMP pool. A row (at most a few tens of KB) stays in L1/L2 between its passes, so the
// extra passes cost cache reads, not memory bandwidth.
// NOTE: statistics are two-pass (mean, then centred squares) so a large mean does not eat
// the variance, and the mean pass sums x - x[0] so its partial sums stay small; sums run in
// several f32 vector accumulators, each lane adding H / 32 terms.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/vec_math.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

// Rows per parallel chunk: about 16K elements, so small tensors stay on one thread.
int64_t row_grain(int64_t h) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(h, 1)); }

void check_rows(const Tensor& x) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32, "norm/softmax: x must be f32");
  PRISM_CHECK(x.dim() >= 1);
}

void check_param(const Tensor& p, int64_t h) {
  PRISM_CHECK_MSG(p.dtype() == DType::f32 && p.dim() == 1 && p.size(0) == h && p.is_contiguous(),
                  "norm: weight/bias must be [H] f32, contiguous");
}

#ifdef __AVX512F__
using cpu::tail_mask;

// sum(x - c): c (the row's first value) keeps the partial sums small when the mean is large.
float row_sum(const float* x, int64_t h, float c) {
  const __m512 vc = _mm512_set1_ps(c);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= h; i += 32) {
    a0 = _mm512_add_ps(a0, _mm512_sub_ps(_mm512_loadu_ps(x + i), vc));
    a1 = _mm512_add_ps(a1, _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vc));
  }
  for (; i < h; i += 16) {
    const __mmask16 m = tail_mask(std::min<int64_t>(16, h - i));
    a0 = _mm512_add_ps(a0, _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vc));
  }
  return cpu::hsum512(_mm512_add_ps(a0, a1));
}

// sum((x - c)^2)
float row_sq_sum(const float* x, int64_t h, float c) {
  const __m512 vc = _mm512_set1_ps(c);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= h; i += 32) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), vc);
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vc);
    a0 = _mm512_fmadd_ps(d0, d0, a0);
    a1 = _mm512_fmadd_ps(d1, d1, a1);
  }
  for (; i < h; i += 16) {
    const __mmask16 m = tail_mask(std::min<int64_t>(16, h - i));
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vc);
    a0 = _mm512_fmadd_ps(d, d, a0);
  }
  return cpu::hsum512(_mm512_add_ps(a0, a1));
}

// y = (x - c) * s * w (+ b); b may be null.
void row_scale(const float* x, float* y, int64_t h, float c, float s, const float* w, const float* b) {
  const __m512 vc = _mm512_set1_ps(c), vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < h; i += 16) {
    const __mmask16 m = h - i >= 16 ? __mmask16(0xffff) : tail_mask(h - i);
    const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vc), vs);
    const __m512 vb = b ? _mm512_maskz_loadu_ps(m, b + i) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(n, _mm512_maskz_loadu_ps(m, w + i), vb));
  }
}

float row_max(const float* x, int64_t h) {
  __m512 a = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < h; i += 16) {
    const __mmask16 m = h - i >= 16 ? __mmask16(0xffff) : tail_mask(h - i);
    a = _mm512_mask_max_ps(a, m, a, _mm512_maskz_loadu_ps(m, x + i));
  }
  return cpu::hmax512(a);
}

// y = exp(x - c); returns sum(y).
float row_exp(const float* x, float* y, int64_t h, float c) {
  const __m512 vc = _mm512_set1_ps(c);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < h; i += 16) {
    const __mmask16 m = h - i >= 16 ? __mmask16(0xffff) : tail_mask(h - i);
    const __m512 e = cpu::exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vc));
    _mm512_mask_storeu_ps(y + i, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  return cpu::hsum512(acc);
}

void row_mul(float* y, int64_t h, float s) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < h; i += 16) {
    const __mmask16 m = h - i >= 16 ? __mmask16(0xffff) : tail_mask(h - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), vs));
  }
}

#else  // scalar fallback

float row_sum(const float* x, int64_t h, float c) {
  float s = 0;
  for (int64_t i = 0; i < h; ++i) s += x[i] - c;
  return s;
}
float row_sq_sum(const float* x, int64_t h, float c) {
  float s = 0;
  for (int64_t i = 0; i < h; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}
void row_scale(const float* x, float* y, int64_t h, float c, float s, const float* w, const float* b) {
  for (int64_t i = 0; i < h; ++i) y[i] = (x[i] - c) * s * w[i] + (b ? b[i] : 0.0f);
}
float row_max(const float* x, int64_t h) {
  float m = -INFINITY;
  for (int64_t i = 0; i < h; ++i) m = std::max(m, x[i]);
  return m;
}
float row_exp(const float* x, float* y, int64_t h, float c) {
  float s = 0;
  for (int64_t i = 0; i < h; ++i) s += (y[i] = cpu::exp_scalar(x[i] - c));
  return s;
}
void row_mul(float* y, int64_t h, float s) {
  for (int64_t i = 0; i < h; ++i) y[i] *= s;
}

#endif

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  check_rows(x);
  const int64_t h = x.size(-1);
  check_param(weight, h);
  if (bias.defined()) check_param(bias, h);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  float* py = out.data<float>();
  const float* w = weight.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  const int64_t rows = h ? x.numel() / h : 0;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * h;
      const float mean = xr[0] + row_sum(xr, h, xr[0]) / float(h);
      const float var = row_sq_sum(xr, h, mean) / float(h);
      row_scale(xr, py + r * h, h, mean, 1.0f / std::sqrt(var + eps), w, b);
    }
  });
  return out;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  check_rows(x);
  const int64_t h = x.size(-1);
  check_param(weight, h);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  float* py = out.data<float>();
  const float* w = weight.data<float>();
  const int64_t rows = h ? x.numel() / h : 0;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * h;
      const float ms = row_sq_sum(xr, h, 0.0f) / float(h);
      row_scale(xr, py + r * h, h, 0.0f, 1.0f / std::sqrt(ms + eps), w, nullptr);
    }
  });
  return out;
}

Tensor softmax(const Tensor& x) {
  check_rows(x);
  const int64_t h = x.size(-1);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  float* py = out.data<float>();
  const int64_t rows = h ? x.numel() / h : 0;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // Subtracting the row max keeps exp in range; an all -inf row gives NaN, as PyTorch.
      const float mx = row_max(px + r * h, h);
      const float sum = row_exp(px + r * h, py + r * h, h, mx);
      row_mul(py + r * h, h, 1.0f / sum);
    }
  });
  return out;
}

}  // namespace prism::ops

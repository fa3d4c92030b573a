// layer_norm, rms_norm and softmax over the last dim: one row at a time, rows spread over the
// OpenMP pool. A row (at most a few tens of KB) stays in L1/L2 between its passes, so the
// extra passes cost cache reads, not memory bandwidth.
// NOTE: statistics are two-pass (mean, then centred squares) so a large mean does not eat
// the variance, and the mean pass sums x - x[0] so its partial sums stay small; sums run in
// several f32 vector accumulators, each lane adding H / 32 terms (H / 16 under AVX2). The row
// passes are the tier's (runtime/cpu/kernels/rows.cpp).
#include <algorithm>
#include <cmath>

#include "runtime/cpu/row_kernels.h"
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
  const auto norm = cpu::row_kernels().layer_norm;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) norm(px + r * h, py + r * h, h, w, b, eps);
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
  const auto norm = cpu::row_kernels().rms_norm;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) norm(px + r * h, py + r * h, h, w, eps);
  });
  return out;
}

namespace {

// The segment of each of `rows` rows: weights row b for rows [cu[b], cu[b + 1]). weights [H]
// (one for all, cu_seqlens may be undefined) or [B, H] with cu_seqlens [B + 1] i32 covering
// all rows. Returns the per-row weight pointers' base and the host cu_seqlens.
struct SegmentWeights {
  const float* w = nullptr;
  int64_t h = 0, segments = 1;
  const int32_t* cu = nullptr;  // null: one segment
  // Calls fn(first_row, last_row, weight) for each segment's part of [r0, r1).
  template <class Fn>
  void for_each(int64_t r0, int64_t r1, Fn fn) const {
    if (!cu) return fn(r0, r1, w);
    for (int64_t b = 0; b < segments; ++b) {
      const int64_t s = std::max<int64_t>(r0, cu[b]), e = std::min<int64_t>(r1, cu[b + 1]);
      if (s < e) fn(s, e, w + b * h);
    }
  }
};

SegmentWeights segment_weights(const Tensor& weights, const Tensor& cu_seqlens, int64_t rows, int64_t h) {
  PRISM_CHECK_MSG(weights.dtype() == DType::f32 && weights.is_contiguous() && weights.size(-1) == h &&
                      (weights.dim() == 1 || weights.dim() == 2),
                  "norm: segment weights must be [H] or [B, H] f32, contiguous");
  SegmentWeights sw{weights.data<float>(), h};
  if (weights.dim() == 1) return sw;
  sw.segments = weights.size(0);
  PRISM_CHECK_MSG(cu_seqlens.defined() && cu_seqlens.dtype() == DType::i32 && cu_seqlens.dim() == 1 &&
                      cu_seqlens.size(0) == sw.segments + 1 && cu_seqlens.is_contiguous(),
                  "norm: [B, H] weights need cu_seqlens [B + 1] i32");
  sw.cu = cu_seqlens.data<int32_t>();
  PRISM_CHECK_MSG(sw.cu[0] == 0 && sw.cu[sw.segments] == rows, "norm: cu_seqlens must cover the rows from 0");
  for (int64_t b = 0; b < sw.segments; ++b) PRISM_CHECK_MSG(sw.cu[b] <= sw.cu[b + 1], "norm: cu_seqlens must not decrease");
  return sw;
}

}  // namespace

Tensor rms_norm_segments(const Tensor& x, const Tensor& weights, const Tensor& cu_seqlens, float eps) {
  check_rows(x);
  PRISM_CHECK_MSG(x.dim() == 2 && x.stride(1) == 1, "rms_norm_segments: x must be [T, H] with contiguous rows");
  const int64_t rows = x.size(0), h = x.size(1), sx = x.stride(0);
  const SegmentWeights sw = segment_weights(weights, cu_seqlens, rows, h);
  Tensor out = Tensor::empty({rows, h}, DType::f32);  // [T, H]
  const float* px = x.data<float>();
  float* py = out.data<float>();
  const auto norm = cpu::row_kernels().rms_norm;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    sw.for_each(r0, r1, [&](int64_t s, int64_t e, const float* w) {
      for (int64_t r = s; r < e; ++r) norm(px + r * sx, py + r * h, h, w, eps);
    });
  });
  return out;
}

void add_rms_norm_(Tensor& x, const Tensor& y, const Tensor& weights, const Tensor& cu_seqlens, float eps) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && y.dtype() == DType::f32 && x.dim() == 2 && y.shape() == x.shape() &&
                      x.stride(1) == 1 && y.stride(1) == 1,
                  "add_rms_norm_: x and y must be [T, H] f32 with contiguous rows");
  const int64_t rows = x.size(0), h = x.size(1), sx = x.stride(0), sy = y.stride(0);
  const SegmentWeights sw = segment_weights(weights, cu_seqlens, rows, h);
  float* px = x.data<float>();
  const float* py = y.data<float>();
  const auto add_norm = cpu::row_kernels().add_rms_norm;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    sw.for_each(r0, r1, [&](int64_t s, int64_t e, const float* w) {
      for (int64_t r = s; r < e; ++r) add_norm(px + r * sx, py + r * sy, h, w, eps);
    });
  });
}

Tensor softmax(const Tensor& x) {
  check_rows(x);
  const int64_t h = x.size(-1);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  float* py = out.data<float>();
  const int64_t rows = h ? x.numel() / h : 0;
  // Subtracting the row max keeps exp in range; an all -inf row gives NaN, as PyTorch.
  const auto softmax_row = cpu::row_kernels().softmax;
  parallel_for(rows, row_grain(h), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) softmax_row(px + r * h, py + r * h, h);
  });
  return out;
}

}  // namespace prism::ops

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

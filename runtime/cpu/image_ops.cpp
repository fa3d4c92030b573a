// The autoencoders' ops on NCHW f32 activations: group normalisation (with SiLU folded into its
// affine pass), nearest upsampling, and the elementwise ReLU and tanh their blocks end with.
// Each is one or two passes over memory, spread over the OpenMP pool; convolutions (oneDNN,
// conv.cpp) dominate these networks, so these stay plain loops until a profile says otherwise.
// NOTE: group_norm accumulates each group's mean and variance in double, two passes (mean,
// then squared deviations), so a group of millions of elements with a large mean (a VAE at
// 2048² has 4M per group) loses no precision to cancellation.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/pointwise_kernels.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

constexpr int64_t kGrain = 1 << 15;  // elements: smaller tensors stay on one thread

float silu_of(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

Tensor relu(const Tensor& x) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32, "relu: x must be f32");
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  float* py = out.data<float>();
  const auto activate = cpu::pointwise_kernels().activate;
  const int64_t n = x.numel();
  parallel_for((n + kGrain - 1) / kGrain, 1, [&](int64_t b0, int64_t b1) {
    const int64_t i0 = b0 * kGrain;
    activate(px + i0, nullptr, py + i0, std::min(n, b1 * kGrain) - i0, Activation::relu);
  });
  return out;
}

Tensor tanh(const Tensor& x) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32, "tanh: x must be f32");
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  float* py = out.data<float>();
  parallel_for(x.numel(), kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) py[i] = std::tanh(px[i]);
  });
  return out;
}

Tensor group_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups, float eps, bool silu) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && x.dim() == 4 && x.is_contiguous(),
                  "group_norm: x must be [N, C, H, W] f32, contiguous");
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  PRISM_CHECK_MSG(groups > 0 && c % groups == 0, "group_norm: groups must divide the channels");
  for (const Tensor* t : {&weight, &bias})
    PRISM_CHECK_MSG(!t->defined() || (t->dtype() == DType::f32 && t->numel() == c && t->is_contiguous()),
                    "group_norm: weight and bias must be [C] f32");
  const int64_t cg = c / groups, group_size = cg * hw;
  const float* px = x.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  float* py = out.data<float>();
  // One (sample, group) per task: groups of a real VAE hold 16K-4M elements, plenty each.
  parallel_for(n * groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const float* src = px + g * group_size;
      float* dst = py + g * group_size;
      double sum = 0;
      for (int64_t i = 0; i < group_size; ++i) sum += src[i];
      const double mean = sum / double(group_size);
      double sq = 0;
      for (int64_t i = 0; i < group_size; ++i) sq += (src[i] - mean) * (src[i] - mean);
      const double inv_std = 1.0 / std::sqrt(sq / double(group_size) + eps);
      for (int64_t k = 0; k < cg; ++k) {
        const int64_t ch = (g % groups) * cg + k;
        // y = (x - mean) * inv_std * w + b, as one multiply-add per element.
        const float scale = float(inv_std * (pw ? pw[ch] : 1.0f));
        const float shift = float((pb ? pb[ch] : 0.0f) - mean * inv_std * (pw ? pw[ch] : 1.0f));
        const float* s = src + k * hw;
        float* d = dst + k * hw;
        if (silu)
          for (int64_t i = 0; i < hw; ++i) d[i] = silu_of(s[i] * scale + shift);
        else
          for (int64_t i = 0; i < hw; ++i) d[i] = s[i] * scale + shift;
      }
    }
  });
  return out;
}

Tensor upsample_nearest(const Tensor& x, int64_t factor) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && x.dim() == 4, "upsample_nearest: x must be [N, C, H, W] f32");
  PRISM_CHECK_MSG(factor >= 1, "upsample_nearest: factor must be at least 1");
  const Tensor xc = x.contiguous();
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = h * factor, ow = w * factor;
  Tensor out = Tensor::empty({x.size(0), x.size(1), oh, ow}, DType::f32);
  const float* px = xc.data<float>();
  float* py = out.data<float>();
  parallel_for(planes * h, std::max<int64_t>(1, kGrain / std::max<int64_t>(ow * factor, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {  // r: one input row of one plane
                   const float* s = px + r * w;
                   float* d = py + r * factor * ow;
                   for (int64_t j = 0; j < w; ++j) std::fill_n(d + j * factor, factor, s[j]);
                   for (int64_t k = 1; k < factor; ++k) std::copy_n(d, ow, d + k * ow);
                 }
               });
  return out;
}

}  // namespace prism::ops

// engines/denoise/guidance.cpp: CFG, its interval and truncation, CFG-Zero*, Z-Image's
// normalization and rescale_noise_cfg. Reductions accumulate in double.
#include "engines/denoise/guidance.h"

#include <cmath>
#include <string>

#include "base/check.h"

namespace prism::engines::denoise {
namespace {

void check_pair(const Tensor& a, const Tensor& b) {
  PRISM_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32);
  PRISM_CHECK(a.is_contiguous() && b.is_contiguous());
  PRISM_CHECK(a.shape() == b.shape());
}

double dot(const Tensor& a, const Tensor& b) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  double s = 0;
  for (int64_t e = 0; e < a.numel(); ++e) s += double(pa[e]) * double(pb[e]);
  return s;
}

double unbiased_std(const Tensor& t) {
  const float* p = t.data<float>();
  const int64_t n = t.numel();
  double mean = 0;
  for (int64_t e = 0; e < n; ++e) mean += p[e];
  mean /= double(n);
  double ss = 0;
  for (int64_t e = 0; e < n; ++e) ss += (p[e] - mean) * (p[e] - mean);
  return std::sqrt(ss / double(n - 1));
}

void scale_in_place(Tensor& t, double s) {
  float* p = t.data<float>();
  for (int64_t e = 0; e < t.numel(); ++e) p[e] = float(double(p[e]) * s);
}

}  // namespace

Status GuidanceParams::validate() const {
  if (!std::isfinite(guidance_scale)) return invalid_argument("guidance_scale must be finite");
  if (!(interval_start >= 0 && interval_start <= interval_stop && interval_stop <= 1))
    return invalid_argument("the CFG interval must satisfy 0 <= start <= stop <= 1, got [" +
                            std::to_string(interval_start) + ", " + std::to_string(interval_stop) + ")");
  if (cfg_truncation && !(*cfg_truncation >= 0)) return invalid_argument("cfg_truncation must be >= 0");
  if (!(cfg_normalization >= 0)) return invalid_argument("cfg_normalization must be >= 0");
  if (zero_init_steps < 0) return invalid_argument("zero_init_steps must be >= 0");
  if (!(guidance_rescale >= 0 && guidance_rescale <= 1)) return invalid_argument("guidance_rescale must be in [0, 1]");
  return Status();
}

bool cfg_active(const GuidanceParams& g, bool has_uncond, int step, int num_steps, double sigma) {
  if (g.guidance_scale == 1.0 || !has_uncond) return false;
  // int() of the fractions, as a Python pipeline would write it.
  if (step < int(g.interval_start * num_steps) || step >= int(g.interval_stop * num_steps)) return false;
  if (g.cfg_truncation && *g.cfg_truncation <= 1.0 && 1.0 - sigma > *g.cfg_truncation) return false;
  return true;
}

Tensor cfg_combine(const Tensor& cond, const Tensor& uncond, double w, double uncond_scale) {
  check_pair(cond, uncond);
  Tensor out = Tensor::empty(cond.shape(), DType::f32);
  const float* pc = cond.data<float>();
  const float* pu = uncond.data<float>();
  float* po = out.data<float>();
  for (int64_t e = 0; e < cond.numel(); ++e) {
    const double u = uncond_scale * double(pu[e]);
    po[e] = float(u + w * (double(pc[e]) - u));
  }
  return out;
}

double cfg_zero_star_scale(const Tensor& cond, const Tensor& uncond) {
  check_pair(cond, uncond);
  return dot(cond, uncond) / (dot(uncond, uncond) + 1e-8);
}

void cap_norm(Tensor& pred, const Tensor& cond, double factor) {
  check_pair(pred, cond);
  const double cap = std::sqrt(dot(cond, cond)) * factor;
  const double norm = std::sqrt(dot(pred, pred));
  if (norm > cap) scale_in_place(pred, cap / norm);
}

void rescale_noise_cfg(Tensor& pred, const Tensor& cond, double phi) {
  check_pair(pred, cond);
  PRISM_CHECK(pred.numel() > 1);
  // phi * pred * ratio + (1 - phi) * pred: one scale of the whole tensor.
  const double ratio = unbiased_std(cond) / unbiased_std(pred);
  scale_in_place(pred, phi * ratio + (1.0 - phi));
}

Tensor guide(const GuidanceParams& g, const Tensor& cond, const Tensor& uncond) {
  const double uncond_scale = g.cfg_zero_star ? cfg_zero_star_scale(cond, uncond) : 1.0;
  Tensor pred = cfg_combine(cond, uncond, g.guidance_scale, uncond_scale);
  if (g.cfg_normalization > 0) cap_norm(pred, cond, g.cfg_normalization);
  if (g.guidance_rescale > 0) rescale_noise_cfg(pred, cond, g.guidance_rescale);
  return pred;
}

}  // namespace prism::engines::denoise

// engines/denoise/samplers.cpp: the Euler step and UniPC (bh1/bh2 predictor + corrector) for
// flow sigmas, data prediction. Plain loops: the latents are tiny next to the model's pass.
#include "engines/denoise/samplers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"

namespace prism::engines::denoise {
namespace {

void check_pair(const Tensor& a, const Tensor& b) {
  PRISM_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32);
  PRISM_CHECK(a.is_contiguous() && b.is_contiguous());
  PRISM_CHECK(a.shape() == b.shape());
}

// log(alpha / sigma) with alpha = 1 - sigma: the half log-SNR UniPC steps in; +inf at sigma 0.
double lambda_of(double s) {
  return s == 0 ? std::numeric_limits<double>::infinity() : std::log(1.0 - s) - std::log(s);
}

// Solves A x = b (n <= 3) by Gaussian elimination with partial pivoting.
std::vector<double> solve(std::vector<std::vector<double>> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    std::swap(a[c], a[p]);
    std::swap(b[c], b[p]);
    for (size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(n);
  for (size_t r = n; r-- > 0;) {
    double s = b[r];
    for (size_t k = r + 1; k < n; ++k) s -= a[r][k] * x[k];
    x[r] = s / a[r][r];
  }
  return x;
}

// What a UniPC update from sigma s0 to sigma t needs besides the tensors.
struct UniPcCoefficients {
  std::vector<double> rks;  // (lambda_i - lambda_s0) / h of the earlier points, then 1
  std::vector<std::vector<double>> r;  // r[k][j] = rks[j]^k
  std::vector<double> b;
  double h_phi_1 = 0, b_h = 0;
};

UniPcCoefficients coefficients(double s_t, double s_s0, const std::vector<double>& earlier, int order, bool bh2) {
  UniPcCoefficients c;
  const double h = lambda_of(s_t) - lambda_of(s_s0);
  for (double s : earlier) c.rks.push_back((lambda_of(s) - lambda_of(s_s0)) / h);
  c.rks.push_back(1.0);
  const double hh = -h;  // predict_x0
  c.h_phi_1 = std::expm1(hh);
  double h_phi_k = c.h_phi_1 / hh - 1.0;
  c.b_h = bh2 ? std::expm1(hh) : hh;
  double factorial = 1;
  for (int k = 1; k <= order; ++k) {
    std::vector<double> row;
    for (double rk : c.rks) row.push_back(std::pow(rk, k - 1));
    c.r.push_back(std::move(row));
    c.b.push_back(h_phi_k * factorial / c.b_h);
    factorial *= k + 1;
    h_phi_k = h_phi_k / hh - 1.0 / factorial;
  }
  return c;
}

// out = base_scale * base + m0_scale * m0 + sum_j d[j] * (hist[j] - m0) / rks[j]
//       (+ last * (model_t - m0) when model_t is given); each element in double.
Tensor combine(double base_scale, const Tensor& base, double m0_scale, const Tensor& m0,
               const std::vector<const Tensor*>& hist, const std::vector<double>& d, const std::vector<double>& rks,
               const Tensor* model_t, double last) {
  Tensor out = Tensor::empty(base.shape(), DType::f32);
  const int64_t n = base.numel();
  const float* pb = base.data<float>();
  const float* pm = m0.data<float>();
  float* po = out.data<float>();
  for (int64_t e = 0; e < n; ++e) {
    double acc = base_scale * pb[e] + m0_scale * pm[e];
    for (size_t j = 0; j < hist.size(); ++j) acc += d[j] * ((double(hist[j]->data<float>()[e]) - pm[e]) / rks[j]);
    if (model_t) acc += last * (double(model_t->data<float>()[e]) - pm[e]);
    po[e] = float(acc);
  }
  return out;
}

// The data predictions j steps back (j >= 1; x0s.back() is m0, j = 0).
std::vector<const Tensor*> history(const std::deque<Tensor>& x0s, int count) {
  std::vector<const Tensor*> h;
  for (int j = 1; j <= count; ++j) h.push_back(&x0s[x0s.size() - 1 - size_t(j)]);
  return h;
}

Tensor unipc_predictor(const SamplerOptions& o, const SamplerState& st, std::span<const double> sig, const Tensor& x,
                       int order) {
  const int i = st.step;
  const double s_t = sig[size_t(i) + 1], s_s0 = sig[size_t(i)];
  if (s_t == s_s0) return x.clone();  // final_sigmas_type "sigma_min" repeats the last sigma
  std::vector<double> earlier;
  for (int k = 1; k < order; ++k) earlier.push_back(sig[size_t(i - k)]);
  const UniPcCoefficients c = coefficients(s_t, s_s0, earlier, order, o.bh2);
  const double alpha_t = 1.0 - s_t;
  std::vector<double> d;
  if (order == 2) {
    d = {0.5};
  } else if (order > 2) {
    std::vector<std::vector<double>> r(size_t(order - 1));
    for (int k = 0; k < order - 1; ++k) r[size_t(k)].assign(c.r[size_t(k)].begin(), c.r[size_t(k)].end() - 1);
    d = solve(r, std::vector<double>(c.b.begin(), c.b.end() - 1));
  }
  for (double& v : d) v *= -alpha_t * c.b_h;
  return combine(s_t / s_s0, x, -alpha_t * c.h_phi_1, st.x0s.back(), history(st.x0s, order - 1), d, c.rks,
                 nullptr, 0.0);
}

Tensor unipc_corrector(const SamplerOptions& o, const SamplerState& st, std::span<const double> sig,
                       const Tensor& x0_t, int order) {
  const int i = st.step;
  const double s_t = sig[size_t(i)], s_s0 = sig[size_t(i) - 1];
  std::vector<double> earlier;
  for (int k = 1; k < order; ++k) earlier.push_back(sig[size_t(i - (k + 1))]);
  const UniPcCoefficients c = coefficients(s_t, s_s0, earlier, order, o.bh2);
  const std::vector<double> rhos = order == 1 ? std::vector<double>{0.5} : solve(c.r, c.b);
  const double alpha_t = 1.0 - s_t;
  const double scale = -alpha_t * c.b_h;
  std::vector<double> d(rhos.begin(), rhos.end() - 1);
  for (double& v : d) v *= scale;
  return combine(s_t / s_s0, st.last_sample, -alpha_t * c.h_phi_1, st.x0s.back(), history(st.x0s, order - 1), d,
                 c.rks, &x0_t, scale * rhos.back());
}

Tensor unipc_step(const SamplerOptions& o, SamplerState& st, std::span<const double> sig, const Tensor& x,
                  const Tensor& v) {
  const int i = st.step;
  const int num_steps = int(sig.size()) - 1;
  Tensor x0 = predicted_x0(x, v, sig[size_t(i)]);
  Tensor sample = x;
  const bool corrector_off =
      std::find(o.disable_corrector.begin(), o.disable_corrector.end(), int64_t(i - 1)) != o.disable_corrector.end();
  if (i > 0 && !corrector_off && st.last_sample.defined()) sample = unipc_corrector(o, st, sig, x0, st.this_order);
  st.x0s.push_back(std::move(x0));
  while (int(st.x0s.size()) > o.solver_order) st.x0s.pop_front();
  int order = o.lower_order_final ? std::min(o.solver_order, num_steps - i) : o.solver_order;
  // NOTE: into sigma 0, h = inf: a multistep predictor divides by rk = 0 (diffusers returns inf
  // there without lower_order_final), so the step into the terminal 0 is first order whatever
  // the option. Its result is then the data prediction m0 exactly; diffusers' bh1 (B(h) = -h =
  // -inf) multiplies a zero residual by -inf and returns NaN there, Prism leaves the zero
  // residual out (unipc_predictor adds no term at order 1).
  if (sig[size_t(i) + 1] == 0) order = 1;
  st.this_order = std::min(order, st.lower_order_nums + 1);
  st.last_sample = sample;
  Tensor out = unipc_predictor(o, st, sig, sample, st.this_order);
  st.lower_order_nums = std::min(st.lower_order_nums + 1, o.solver_order);
  return out;
}

}  // namespace

SamplerOptions sampler_options(const configs::SchedulerConfig& config) {
  SamplerOptions o;
  if (config.scheduler_class == configs::SchedulerClass::unipc) {
    o.kind = SamplerKind::unipc;
    o.solver_order = config.solver_order;
    o.bh2 = config.bh2;
    o.lower_order_final = config.lower_order_final;
    o.disable_corrector = config.disable_corrector;
  }
  return o;
}

Tensor predicted_x0(const Tensor& x, const Tensor& v, double sigma) {
  check_pair(x, v);
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = x.data<float>();
  const float* pv = v.data<float>();
  float* po = out.data<float>();
  for (int64_t e = 0; e < x.numel(); ++e) po[e] = float(double(px[e]) - sigma * double(pv[e]));
  return out;
}

Tensor euler_step(const Tensor& x, const Tensor& v, double sigma, double sigma_next) {
  check_pair(x, v);
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = x.data<float>();
  const float* pv = v.data<float>();
  float* po = out.data<float>();
  const double dt = sigma_next - sigma;
  for (int64_t e = 0; e < x.numel(); ++e) po[e] = float(double(px[e]) + dt * double(pv[e]));
  return out;
}

Tensor sampler_step(const SamplerOptions& options, SamplerState& state, std::span<const double> sigmas,
                    const Tensor& x, const Tensor& v) {
  PRISM_CHECK(state.step >= 0 && size_t(state.step) + 1 < sigmas.size());
  check_pair(x, v);
  Tensor out = options.kind == SamplerKind::unipc
                   ? unipc_step(options, state, sigmas, x, v)
                   : euler_step(x, v, sigmas[size_t(state.step)], sigmas[size_t(state.step) + 1]);
  ++state.step;
  return out;
}

}  // namespace prism::engines::denoise

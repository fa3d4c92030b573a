// Double-precision reference attention for the kernel tests.
#include "test_util/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace prism::test {
namespace {

double at(const Tensor& t, int64_t i, int64_t h, int64_t d) {
  return t.data<float>()[i * t.stride(0) + h * t.stride(1) + d * t.stride(2)];
}

}  // namespace

std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionCase& c) {
  const int64_t hq = q.size(1), hkv = k.size(1), D = q.size(2), group = hq / hkv;
  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(double(D));
  std::vector<double> out(size_t(q.size(0) * hq * D), 0.0);
  for (size_t s = 0; s + 1 < c.cu_q.size(); ++s) {
    const int q_len = c.cu_q[s + 1] - c.cu_q[s], k_len = c.cu_k[s + 1] - c.cu_k[s];
    const int valid = c.kv_lens.empty() ? k_len : c.kv_lens[s];
    for (int i = 0; i < q_len; ++i) {
      const int64_t qt = c.cu_q[s] + i;
      const int pos = k_len - q_len + i;
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t kh = h / group;
        std::vector<double> scores;
        std::vector<int> keys;
        for (int j = 0; j < valid; ++j) {
          if (c.causal && j > pos) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, qt, h, d) * at(k, c.cu_k[s] + j, kh, d);
          scores.push_back(dot * scale);
          keys.push_back(j);
        }
        if (keys.empty()) continue;
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& x : scores) sum += (x = std::exp(x - mx));
        double* o = out.data() + (qt * hq + h) * D;
        for (size_t n = 0; n < keys.size(); ++n)
          for (int64_t d = 0; d < D; ++d) o[d] += scores[n] / sum * at(v, c.cu_k[s] + keys[n], kh, d);
      }
    }
  }
  return out;
}

Tensor random_tensor(const Dims& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

double max_scaled_error(const Tensor& got, const std::vector<double>& want, double rtol, double atol) {
  const Tensor g = got.contiguous();
  const float* p = g.data<float>();
  if (int64_t(want.size()) != g.numel()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(double(p[i]) - want[i]) / (atol + rtol * std::abs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
  }
  return worst;
}

}  // namespace prism::test

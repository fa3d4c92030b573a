// Shared op-test helpers (see eltwise.h).
#include "test_util/eltwise.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

namespace prism::test {

Tensor random_f32(const Dims& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

double activation_reference(double v, ops::Activation act) {
  switch (act) {
    case ops::Activation::none: return v;
    case ops::Activation::relu: return v > 0 ? v : 0;
    case ops::Activation::gelu_erf: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case ops::Activation::gelu_tanh:
      return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    case ops::Activation::silu: return v / (1 + std::exp(-v));
    case ops::Activation::quick_gelu: return v / (1 + std::exp(-1.702 * v));
  }
  return v;
}

std::vector<double> to_doubles(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data<float>();
  return std::vector<double>(p, p + c.numel());
}

Tensor read_bin(const std::string& path, const Dims& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  in.read(static_cast<char*>(t.raw_data()), std::streamsize(t.nbytes()));
  EXPECT_EQ(size_t(in.gcount()), t.nbytes()) << path << " is short";
  return t;
}

::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double rtol, double atol) {
  if (actual.numel() != int64_t(expected.size()))
    return ::testing::AssertionFailure() << "size " << actual.numel() << " vs " << expected.size();
  const std::vector<double> a = to_doubles(actual);
  int bad = 0;
  std::string report;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = expected[i];
    const bool ok = std::isnan(e) ? std::isnan(a[i]) : std::abs(a[i] - e) <= atol + rtol * std::abs(e);
    if (ok) continue;
    worst = std::max(worst, std::abs(a[i] - e) / (atol + rtol * std::abs(e)));
    if (++bad <= 5) {
      char line[160];
      std::snprintf(line, sizeof line, "\n  [%zu] actual %.9g expected %.9g", i, a[i], e);
      report += line;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements off (worst "
                                       << worst << "x tolerance)" << report;
}

}  // namespace prism::test

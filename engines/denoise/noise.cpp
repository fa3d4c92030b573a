// engines/denoise/noise.cpp: Philox4x32-10 and Box-Muller (the algorithm is frozen in noise.h).
#include "engines/denoise/noise.h"

#include <cmath>
#include <numbers>

namespace prism::engines::denoise {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kBump0 = 0x9E3779B9u, kBump1 = 0xBB67AE85u;

// A uniform in (0, 1) from the top 53 bits of a 64-bit word: never 0, so log() is finite.
double open_uniform(uint32_t lo, uint32_t hi) {
  const uint64_t bits = (uint64_t(hi) << 32 | lo) >> 11;
  return (double(bits) + 0.5) * 0x1p-53;
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k = {k[0] + kBump0, k[1] + kBump1};
    const uint64_t p0 = uint64_t(kMul0) * c[0];
    const uint64_t p1 = uint64_t(kMul1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

Tensor gaussian_noise(const Dims& shape, uint64_t seed) {
  Tensor out = Tensor::empty(shape, DType::f32);
  float* p = out.data<float>();
  const int64_t n = out.numel();
  const std::array<uint32_t, 2> key = {uint32_t(seed), uint32_t(seed >> 32)};
  for (int64_t e = 0; e < n; e += 2) {
    const uint64_t j = uint64_t(e / 2);
    const std::array<uint32_t, 4> r = philox4x32_10({uint32_t(j), uint32_t(j >> 32), 0, 0}, key);
    const double radius = std::sqrt(-2.0 * std::log(open_uniform(r[0], r[1])));
    const double theta = 2.0 * std::numbers::pi * open_uniform(r[2], r[3]);
    p[e] = float(radius * std::cos(theta));
    if (e + 1 < n) p[e + 1] = float(radius * std::sin(theta));
  }
  return out;
}

}  // namespace prism::engines::denoise

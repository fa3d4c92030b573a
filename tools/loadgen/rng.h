// tools/loadgen/rng.h: the load generator's random numbers. Everything random in a run (arrival
// times, prompt words, lengths) comes from these streams, so the same seed sends the same
// requests. NOTE: std::mt19937_64 is specified bit for bit by the standard, but the std::
// distributions are not; the transforms here are our own so a seed means the same sequence
// with any standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace prism::tools::loadgen {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // An independent stream for (seed, stream, index): request `index` of a run draws from
  // Rng::derive(seed, kRequestStream, index) whatever order the requests are sent in.
  static Rng derive(uint64_t seed, uint64_t stream, uint64_t index = 0) {
    return Rng(splitmix64(splitmix64(seed ^ splitmix64(stream)) ^ index));
  }

  uint64_t next_u64() { return engine_(); }
  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (inclusive); lo when hi <= lo. The modulo bias is below
  // 2^-40 for any range a benchmark uses.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(engine_() % span);
  }
  // Exponential with the given rate (mean 1 / rate): the gaps of a Poisson process.
  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }

  static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

 private:
  std::mt19937_64 engine_;
};

// Stream ids for Rng::derive.
inline constexpr uint64_t kArrivalStream = 1;
inline constexpr uint64_t kRequestStream = 2;
inline constexpr uint64_t kSharedTextStream = 3;  // text shared by requests (system prompts, sessions)

}  // namespace prism::tools::loadgen

// EnergyVad: the voice activity detector that needs no model file (the demo's, and any
// deployment without a Silero file). Two features per 32 ms window: its level above the noise
// floor, and the spectral flatness of 94 Hz – 4 kHz. It must stay cheap (one 512-point FFT a
// window) and keep no audio: the floor is a handful of levels.
// NOTE: the noise floor is minimum statistics: the third-lowest level of the last 1.5 s of
// windows that carry any signal (digital silence says nothing about the noise, and one odd
// window must not sink the floor), never below -60 dBFS. Speech has pauses within 1.5 s, so
// the floor follows any stationary noise within that time, while speech rises 20–40 dB
// above it; flat (white-like) noise is refused by its shape even before the floor catches up.
#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "base/check.h"
#include "media/speech_spans.h"

namespace prism::media {

namespace {

constexpr double kDigitalSilenceDb = -80.0;  // windows quieter than this do not move the floor
constexpr double kLowestFloorDb = -60.0;     // the floor never counts as lower than this
constexpr int kFloorRank = 3;                // the floor is the 3rd-lowest recent level
constexpr double kSnrMidDb = 15.0, kSnrScaleDb = 2.5;  // level above floor: P = 0.5 at 15 dB
constexpr double kFlatnessMid = 0.25, kFlatnessScale = 0.05;  // white noise ≈ 0.56, vowels < 0.05
constexpr int kBandFirstBin = 3, kBandLastBin = 128;  // 94 Hz .. 4 kHz at 31.25 Hz a bin

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// The r2c plan of kVadWindow points, made once (FFTW's planner is not thread-safe; executing
// on other fftwf_alloc'd arrays is).
fftwf_plan vad_fft_plan() {
  static std::mutex mutex;
  static fftwf_plan plan = nullptr;
  std::lock_guard lock(mutex);
  if (!plan) {
    float* in = fftwf_alloc_real(kVadWindow);
    fftwf_complex* out = fftwf_alloc_complex(kVadWindow / 2 + 1);
    plan = fftwf_plan_dft_r2c_1d(kVadWindow, in, out, FFTW_ESTIMATE);
    fftwf_free(in);
    fftwf_free(out);
    PRISM_CHECK(plan != nullptr);
  }
  return plan;
}

// Geometric over arithmetic mean of the power spectrum in the speech band: 1 for a flat
// spectrum, near 0 for a few strong harmonics.
double spectral_flatness(std::span<const float> window) {
  float* in = fftwf_alloc_real(kVadWindow);
  fftwf_complex* out = fftwf_alloc_complex(kVadWindow / 2 + 1);
  const size_t n = std::min<size_t>(window.size(), kVadWindow);
  for (size_t i = 0; i < size_t(kVadWindow); ++i) {
    const double hann = 0.5 - 0.5 * std::cos(2.0 * M_PI * double(i) / kVadWindow);
    in[i] = i < n ? float(window[i] * hann) : 0.0f;
  }
  fftwf_execute_dft_r2c(vad_fft_plan(), in, out);
  double log_sum = 0, sum = 0;
  constexpr double kEps = 1e-12;
  for (int k = kBandFirstBin; k <= kBandLastBin; ++k) {
    const double p = double(out[k][0]) * out[k][0] + double(out[k][1]) * out[k][1] + kEps;
    log_sum += std::log(p);
    sum += p;
  }
  fftwf_free(in);
  fftwf_free(out);
  constexpr int kBins = kBandLastBin - kBandFirstBin + 1;
  return std::exp(log_sum / kBins) / (sum / kBins);
}

}  // namespace

float EnergyVad::push(std::span<const float> window) {
  if (window.empty()) return 0.0f;
  double energy = 0;
  for (float x : window) energy += double(x) * x;
  // A partial window counts as zero-padded to kVadWindow (as the last window of a recording).
  const double level_db = 10.0 * std::log10(energy / double(std::max<size_t>(window.size(), kVadWindow)) + 1e-10);
  if (!std::isfinite(level_db)) return 0.0f;  // NaN / Inf samples: no speech, and the floor is kept

  if (level_db >= kDigitalSilenceDb) {
    recent_db_[size_t(windows_ % kFloorWindows)] = float(level_db);
    recent_count_ = std::min(recent_count_ + 1, kFloorWindows);
    ++windows_;
  }
  double floor_db = kLowestFloorDb;
  if (recent_count_ > 0) {
    std::array<float, kFloorWindows> levels = recent_db_;
    const int rank = std::min(kFloorRank, recent_count_) - 1;
    std::nth_element(levels.begin(), levels.begin() + rank, levels.begin() + recent_count_);
    floor_db = std::max(kLowestFloorDb, double(levels[size_t(rank)]));
  }
  const double loud = sigmoid((level_db - floor_db - kSnrMidDb) / kSnrScaleDb);
  const double voiced = sigmoid((kFlatnessMid - spectral_flatness(window)) / kFlatnessScale);
  return float(loud * voiced);
}

std::vector<float> energy_vad_probabilities(std::span<const float> samples16k) {
  EnergyVad vad;
  std::vector<float> probs;
  probs.reserve((samples16k.size() + kVadWindow - 1) / kVadWindow);
  for (size_t i = 0; i < samples16k.size(); i += kVadWindow)
    probs.push_back(vad.push(samples16k.subspan(i, std::min<size_t>(kVadWindow, samples16k.size() - i))));
  return probs;
}

}  // namespace prism::media

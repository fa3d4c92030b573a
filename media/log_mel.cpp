// log_mel_spectrogram / mel_filters: Whisper's audio front end, step for step as
// openai/whisper's `log_mel_spectrogram` (torch.stft, center=True, reflect padding, periodic
// Hann window) with librosa's Slaney filters. tests/reference/whisper_mel.py is the reference.
// It must not resample or decode: samples arrive at 16 kHz (media/audio.h).
// NOTE: the clamp at (max - 8) uses the maximum over the whole padded input, so the output
// depends on every frame: the maximum is a reduction between the two passes.
#include "media/log_mel.h"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "base/check.h"
#include "runtime/threads.h"

namespace prism::media {

namespace {

// librosa's Slaney mel scale (htk=False): linear below 1 kHz (200/3 Hz per mel), logarithmic
// above (27 mels per factor 6.4).
constexpr double kMelLinearHzPerMel = 200.0 / 3.0;
constexpr double kMelLogMinHz = 1000.0;
constexpr double kMelLogMinMel = kMelLogMinHz / kMelLinearHzPerMel;  // 15

double mel_log_step() { return std::log(6.4) / 27.0; }

double hz_to_mel(double hz) {
  if (hz >= kMelLogMinHz) return kMelLogMinMel + std::log(hz / kMelLogMinHz) / mel_log_step();
  return hz / kMelLinearHzPerMel;
}

double mel_to_hz(double mel) {
  if (mel >= kMelLogMinMel) return kMelLogMinHz * std::exp(mel_log_step() * (mel - kMelLogMinMel));
  return mel * kMelLinearHzPerMel;
}

// The r2c plan of n_fft = 400, made once. NOTE: FFTW's planner is not thread-safe but
// fftwf_execute_dft_r2c on other arrays is, provided they have the plan's alignment: every
// buffer comes from fftwf_alloc_*, like the ones the plan was made on.
fftwf_plan whisper_fft_plan() {
  static std::mutex mutex;
  static fftwf_plan plan = nullptr;
  std::lock_guard lock(mutex);
  if (!plan) {
    float* in = fftwf_alloc_real(kWhisperFft);
    fftwf_complex* out = fftwf_alloc_complex(kWhisperFft / 2 + 1);
    plan = fftwf_plan_dft_r2c_1d(kWhisperFft, in, out, FFTW_ESTIMATE);
    fftwf_free(in);
    fftwf_free(out);
    PRISM_CHECK(plan != nullptr);
  }
  return plan;
}

// torch.hann_window(400) (periodic): 0.5 - 0.5 cos(2 pi n / 400).
std::vector<float> periodic_hann(int n) {
  std::vector<float> w(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) w[size_t(i)] = float(0.5 - 0.5 * std::cos(2.0 * M_PI * i / n));
  return w;
}

// Index into a signal of length n under reflect padding (numpy's "reflect", which torch's
// matches where torch allows it): ... 2 1 | 0 1 2 ... n-1 | n-2 n-3 ...; repeated for pads
// longer than the signal, as numpy does.
int64_t reflect_index(int64_t j, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  j %= period;
  if (j < 0) j += period;
  return j < n ? j : period - j;
}

// The nonzero columns of each filter row, so the mel product skips the zeros (each FFT bin
// feeds at most two filters).
struct FilterRows {
  std::vector<int> begin, end;
};

FilterRows nonzero_ranges(const std::vector<float>& filters, int n_mels, int n_bins) {
  FilterRows rows;
  rows.begin.assign(size_t(n_mels), 0);
  rows.end.assign(size_t(n_mels), 0);
  for (int m = 0; m < n_mels; ++m) {
    const float* row = filters.data() + size_t(m) * n_bins;
    int b = 0, e = n_bins;
    while (b < e && row[b] == 0.0f) ++b;
    while (e > b && row[e - 1] == 0.0f) --e;
    rows.begin[size_t(m)] = b;
    rows.end[size_t(m)] = e;
  }
  return rows;
}

}  // namespace

std::vector<float> mel_filters(int n_mels, int n_fft, int sample_rate) {
  PRISM_CHECK(n_mels >= 1 && n_mels <= 512);
  PRISM_CHECK(n_fft >= 2 && sample_rate > 0);
  const int n_bins = n_fft / 2 + 1;
  // NOTE: librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, htk=False, norm="slaney"):
  // n_mels + 2 points evenly spaced in mel, triangles between neighbours, each scaled by
  // 2 / (its width in Hz) so every filter has the same area. Computed in double.
  const double max_mel = hz_to_mel(sample_rate / 2.0);
  std::vector<double> mel_hz(size_t(n_mels) + 2);
  const double step = max_mel / double(n_mels + 1);
  for (int i = 0; i < n_mels + 2; ++i) mel_hz[size_t(i)] = mel_to_hz(i == n_mels + 1 ? max_mel : i * step);

  std::vector<float> weights(size_t(n_mels) * n_bins);
  for (int m = 0; m < n_mels; ++m) {
    const double lo = mel_hz[size_t(m)], mid = mel_hz[size_t(m) + 1], hi = mel_hz[size_t(m) + 2];
    const double slaney_norm = 2.0 / (hi - lo);
    for (int k = 0; k < n_bins; ++k) {
      const double hz = double(k) * sample_rate / n_fft;
      const double rising = (hz - lo) / (mid - lo), falling = (hi - hz) / (hi - mid);
      weights[size_t(m) * n_bins + k] = float(std::max(0.0, std::min(rising, falling)) * slaney_norm);
    }
  }
  return weights;
}

LogMel log_mel_spectrogram(std::span<const float> samples, int n_mels, int64_t pad_to_samples) {
  PRISM_CHECK(n_mels >= 1 && n_mels <= 512);
  PRISM_CHECK(pad_to_samples >= 0);
  constexpr int kBins = kWhisperFft / 2 + 1;
  constexpr int kHalf = kWhisperFft / 2;
  const int64_t n = pad_to_samples > 0 ? pad_to_samples : int64_t(samples.size());
  const int64_t have = std::min<int64_t>(n, int64_t(samples.size()));  // the rest is zeros

  LogMel out;
  out.n_mels = n_mels;
  // centred STFT: 1 + n / hop frames, the last one dropped as Whisper does.
  out.frames = int(n / kWhisperHop);
  if (out.frames == 0) return out;
  const int64_t frames = out.frames;
  out.values.resize(size_t(n_mels) * size_t(frames));

  const std::vector<float> filters = mel_filters(n_mels);
  const FilterRows rows = nonzero_ranges(filters, n_mels, kBins);
  const std::vector<float> window = periodic_hann(kWhisperFft);
  const fftwf_plan plan = whisper_fft_plan();
  const auto sample_at = [&](int64_t j) -> float {
    const int64_t i = (j >= 0 && j < n) ? j : reflect_index(j, n);
    return i < have ? samples[size_t(i)] : 0.0f;
  };

  // Pass 1: log10 of the mel energies per frame, and the maximum of each chunk.
  std::mutex max_mutex;
  float global_max = -INFINITY;
  parallel_for(frames, 16, [&](int64_t begin, int64_t end) {
    float* in = fftwf_alloc_real(kWhisperFft);
    fftwf_complex* spectrum = fftwf_alloc_complex(kBins);
    float power[kBins];
    float local_max = -INFINITY;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t first = t * kWhisperHop - kHalf;  // frame t is centred on sample t * hop
      for (int k = 0; k < kWhisperFft; ++k) in[k] = sample_at(first + k) * window[size_t(k)];
      fftwf_execute_dft_r2c(plan, in, spectrum);
      for (int k = 0; k < kBins; ++k) power[k] = spectrum[k][0] * spectrum[k][0] + spectrum[k][1] * spectrum[k][1];
      for (int m = 0; m < n_mels; ++m) {
        const float* row = filters.data() + size_t(m) * kBins;
        double sum = 0;
        for (int k = rows.begin[size_t(m)]; k < rows.end[size_t(m)]; ++k) sum += double(row[k]) * power[k];
        const float v = std::log10(std::max(float(sum), 1e-10f));
        out.values[size_t(m) * size_t(frames) + size_t(t)] = v;
        local_max = std::max(local_max, v);
      }
    }
    fftwf_free(in);
    fftwf_free(spectrum);
    std::lock_guard lock(max_mutex);
    global_max = std::max(global_max, local_max);
  });

  // Pass 2: clamp to 8 decades under the maximum, then scale into about [-1, 1].
  const float floor_value = global_max - 8.0f;
  for (float& v : out.values) v = (std::max(v, floor_value) + 4.0f) / 4.0f;
  return out;
}

}  // namespace prism::media

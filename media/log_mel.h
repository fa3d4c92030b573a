// media/log_mel.h: Whisper's log-mel spectrogram, computed as openai/whisper's
// `log_mel_spectrogram` and transformers' WhisperFeatureExtractor do: a periodic Hann window
// of n_fft = 400, hop 160, centred frames (reflect padding of n_fft / 2), |STFT|² with the
// last frame dropped, Slaney-scale mel filters (librosa's, norm "slaney"; 80 or 128 bins over
// 0–8 kHz), log10 of max(x, 1e-10), clamped below at (max - 8), then (x + 4) / 4.
// FFTW does the real FFTs (plans made once, thread-safe to use).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace prism::media {

inline constexpr int kWhisperFft = 400;
inline constexpr int kWhisperHop = 160;
inline constexpr int kWhisperChunkSeconds = 30;
inline constexpr int kWhisperChunkSamples = 480000;  // 30 s at 16 kHz
inline constexpr int kWhisperChunkFrames = 3000;     // mel frames in 30 s

// Slaney mel filter bank: [n_mels, n_fft / 2 + 1] row-major f32 for 16 kHz, fmin 0, fmax 8000
// (what whisper's mel_filters.npz holds for 80 and 128). n_mels in 1..512.
std::vector<float> mel_filters(int n_mels, int n_fft = kWhisperFft, int sample_rate = 16000);

struct LogMel {
  int n_mels = 0;
  int frames = 0;
  std::vector<float> values;  // [n_mels, frames] row-major
};

// samples: 16 kHz mono. pad_to_samples > 0: the audio is zero-padded (or trimmed) to that many
// samples first, as Whisper pads every segment to 30 s (kWhisperChunkSamples → 3000 frames);
// 0: frames = samples / hop. The max for the clamp is taken over the whole (padded) input,
// as Whisper does. n_mels: 80 or 128 (any 1..512 works).
LogMel log_mel_spectrogram(std::span<const float> samples, int n_mels, int64_t pad_to_samples = kWhisperChunkSamples);

}  // namespace prism::media

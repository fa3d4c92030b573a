// models/vad/silero_vad.h: the Silero VAD network (v5/v6, 16 kHz path) on Prism's runtime,
// its weights read from the real silero_vad.onnx (formats/onnx.h): per 512-sample window with
// the 64 samples of context before it, an STFT as a strided conv (the file's
// forward_basis_buffer: 258 × 256, stride 128, right reflect-padding of 64) → magnitude → four
// conv1d + ReLU (encoder.0..3.reparam_conv) → an LSTM cell (decoder.rnn, hidden 128, the state
// carried between windows) → ReLU → 1×1 conv → sigmoid → mean: the speech probability.
// A stream's state is (h, c, context); many streams' windows run as one batch. Weights are
// found by their PyTorch names at the end of the file's names (the exporter prefixes them with
// the If branch); the 16 kHz branch is the one whose STFT basis is 258 × 1 × 256.
// Must not: schedule, buffer audio or decide speech spans (media/speech_spans.h does).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::models {

inline constexpr int kSileroWindow = 512;   // samples per window at 16 kHz
inline constexpr int kSileroContext = 64;   // samples of the previous window before each one
inline constexpr int kSileroHidden = 128;   // LSTM state size

struct SileroState {
  std::array<float, 128> h{}, c{};
  std::array<float, 64> context{};  // the previous window's last 64 samples (zeros at start)
};

class SileroVad {
 public:
  // not_found for a missing file; invalid_argument naming the file for one that is not ONNX
  // or not a Silero VAD v5/v6 model (a weight missing or of another shape).
  static Result<std::unique_ptr<SileroVad>> load(const std::string& onnx_path);

  // Many streams' audio at once: sequences[i] continues states[i] (which advances), as many
  // 512-sample windows as it holds, the last one zero-padded (so only a stream's final piece
  // may end mid-window). Returns each sequence's window probabilities. The front end runs for
  // the windows of every sequence as one batch; only the LSTM steps through them in order.
  std::vector<std::vector<float>> run(std::span<const std::span<const float>> sequences,
                                      std::span<SileroState* const> states) const;

  // One window per stream: windows[i] has 512 samples (16 kHz) for states[i], which advances.
  // Returns each window's speech probability. Thread-safe (no mutable members). Non-finite
  // samples count as 0.
  std::vector<float> step(std::span<const std::span<const float>> windows, std::span<SileroState* const> states) const;

  // A whole recording: its windows in order from a fresh state (the last window zero-padded):
  // probs[i] for samples [i * 512, (i + 1) * 512), what media::speech_spans reads.
  // NOTE: equal to step() window after window from a fresh SileroState (both are run()).
  std::vector<float> probabilities(std::span<const float> samples16k) const;

 private:
  SileroVad() = default;
  struct Weights;
  std::shared_ptr<const Weights> w_;
};

}  // namespace prism::models

// frontends/vad_payload.h: the request and result a voice activity ("vad") deployment passes
// between its callers (long-form transcription, live streams) and its engine. Plain data: a
// stream's detector state travels with each request, so the deployment keeps none and windows
// of every stream can share one forward.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "serving/request.h"

namespace prism::frontends {

inline constexpr int kVadWindowSamples = 512;  // one window: 32 ms at 16 kHz
inline constexpr int kVadContextSamples = 64;  // what the network reads of the window before
inline constexpr int kVadStateSize = 128;      // the recurrent state (Silero's LSTM h and c)

// One stream's detector state between requests. Zeros: a stream that has not started.
struct VadStreamState {
  std::array<float, kVadStateSize> h{}, c{};
  std::array<float, kVadContextSamples> context{};  // the last samples of the previous window
};

struct VadInput final : serving::Payload {
  // 16 kHz mono samples continuing `state`: whole windows, except in a stream's last piece
  // (its last window is zero-padded). At least one sample.
  std::vector<float> samples;
  VadStreamState state;
};

struct VadOutput final : serving::Payload {
  std::vector<float> probabilities;  // one speech probability per window of the input
  VadStreamState state;              // the state after the input's last window
};

// A request's batching cost: its windows.
inline int64_t vad_windows(int64_t samples) { return (samples + kVadWindowSamples - 1) / kVadWindowSamples; }

}  // namespace prism::frontends

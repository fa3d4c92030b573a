// pipelines/transcribe/quality.cpp: openai/whisper's per-decode checks (transcribe.py's
// decode_with_fallback and its no-speech skip) and its temperature ladder.
#include "pipelines/transcribe/quality.h"

#include <zlib.h>

#include <array>
#include <string>

#include "base/check.h"

namespace prism::pipelines::transcribe {
namespace {

constexpr std::array<float, 6> kTemperatureLadder = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};
constexpr float kLadderTolerance = 1e-4f;  // 0.2 given as a float is on the ladder

}  // namespace

float compression_ratio(std::string_view text) {
  if (text.empty()) return 0.0f;
  // Python's zlib.compress(b) is compress2 at Z_DEFAULT_COMPRESSION (level 6, window 15,
  // memLevel 8): the same bytes, so the same ratio as whisper's.
  uLongf size = compressBound(uLong(text.size()));
  std::string out(size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(out.data()), &size, reinterpret_cast<const Bytef*>(text.data()),
                           uLong(text.size()), Z_DEFAULT_COMPRESSION);
  PRISM_CHECK_MSG(rc == Z_OK, "compress2 into a compressBound buffer cannot fail");
  return float(double(text.size()) / double(size));
}

// NOTE: the order is whisper's: a decode that looks like silence (no-speech probability high
// and logprob low) is not re-run even when its other checks fail; it is dropped.
Verdict judge(float compression_ratio, float avg_logprob, float no_speech_prob, const QualityThresholds& t) {
  if (no_speech_prob > t.no_speech && avg_logprob < t.logprob) return Verdict::silence;
  if (compression_ratio > t.compression_ratio || avg_logprob < t.logprob) return Verdict::failed;
  return Verdict::ok;
}

std::vector<float> fallback_after(float t) {
  std::vector<float> out;
  for (const float step : kTemperatureLadder)
    if (step > t + kLadderTolerance) out.push_back(step);
  return out;
}

}  // namespace prism::pipelines::transcribe

// pipelines/transcribe/quality.h: openai/whisper's checks on a decoded chunk (ANCHORS.md,
// "Speech"): it failed when its text's compression ratio (bytes / zlib-compressed bytes) is
// above 2.4 (repetition loops) or its mean token logprob is below -1.0; it is silence when
// the no-speech probability is above 0.6 and the logprob below -1.0 (then it is dropped,
// not re-run). Failed chunks are decoded again at the next temperature of 0, 0.2 ... 1.0.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace prism::pipelines::transcribe {

struct QualityThresholds {
  float compression_ratio = 2.4f;
  float logprob = -1.0f;
  float no_speech = 0.6f;
};

// len(utf8) / len(zlib.compress(utf8)) as whisper computes it: Python's zlib.compress at its
// default level (Z_DEFAULT_COMPRESSION, i.e. 6), so the values are identical. Empty → 0.
float compression_ratio(std::string_view text);

enum class Verdict : uint8_t { ok, silence, failed };

Verdict judge(float compression_ratio, float avg_logprob, float no_speech_prob, const QualityThresholds& t = {});

// The temperatures after `t` in Whisper's ladder (0, 0.2, 0.4, 0.6, 0.8, 1.0), ascending;
// empty at 1.0 and above. A `t` between steps (0.3) continues at the next step (0.4).
std::vector<float> fallback_after(float t);

}  // namespace prism::pipelines::transcribe

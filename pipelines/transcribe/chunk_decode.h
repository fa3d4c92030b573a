// pipelines/transcribe/chunk_decode.h: one decode of one chunk — the generate request it is
// (Whisper's prompt, the chunk's log-mel segment, sampling at one temperature, the speech
// processor's logit rules) and what its output says (text, timed segments, and the numbers
// whisper judges a decode by: avg_logprob, compression ratio, no-speech probability). It
// knows nothing of other chunks, their order or re-runs: that is transcription.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "frontends/speech_processor.h"
#include "pipelines/transcribe/quality.h"

namespace prism::pipelines::transcribe {

struct ChunkDecodeSpec {
  frontends::SpeechDecodeOptions speech;                // task, language, timestamps, previous, segment_seconds
  std::shared_ptr<const std::vector<float>> features;  // [num_mel_bins, frames] f32, shared by re-runs
  int64_t frames = 0;
  float temperature = 0.0f;
  int fixed_tokens = 0;  // > 0: decode exactly this many tokens, end-of-text ignored (benchmarks)
};

// What the engine thread records while the chunk decodes (through the logit hooks); read by
// the completion callback, after the request completed.
struct ChunkDecodeProbe {
  std::vector<frontends::SpeechObservation> observations = std::vector<frontends::SpeechObservation>(1);
  // The end-of-text token's logprob in the processed row of the last step seen, and that
  // step's index (= tokens generated before it): whisper counts the end-of-text in its mean.
  int64_t last_step = -1;
  float eot_logprob = 0.0f;
};

struct ChunkDecode {
  std::unique_ptr<frontends::GenerateInput> input;
  std::shared_ptr<ChunkDecodeProbe> probe;
};

// The request's input (n = 1, logprobs on, max_tokens = the model's max_new_tokens() or what
// the context leaves). frontend.speech() must not be null.
ChunkDecode make_chunk_decode(const frontends::GenerateFrontend& frontend, const ChunkDecodeSpec& spec);

struct DecodedChunk {
  float temperature = 0.0f;
  std::vector<int32_t> tokens;  // generated, end-of-text excluded (timestamps included)
  std::string text;             // text tokens only
  float avg_logprob = 0.0f;
  float compression_ratio = 0.0f;
  float no_speech_prob = 0.0f;
  std::string language;         // the language token the decode used ("" when unknown)
  int64_t decoded_tokens = 0;   // the engine's completion_tokens (end-of-text included)
  Verdict verdict = Verdict::ok;
};

// Reads choice 0 of a completed chunk decode.
DecodedChunk read_chunk_decode(const frontends::SpeechProcessor& speech, const frontends::GenerateOutput& output,
                               const ChunkDecodeProbe& probe, float temperature,
                               const QualityThresholds& thresholds = {});

// whisper's mean: (sum of the chosen tokens' logprobs + the end-of-text's when the decode
// ended on it) / (tokens + 1), the end-of-text counted in the +1 either way.
float whisper_avg_logprob(std::span<const frontends::TokenLogprobs> logprobs, std::optional<float> eot_logprob);

// Of a chunk's attempts (none passed the checks), the one whisper keeps: the highest
// avg_logprob among those within the compression-ratio threshold, else among all
// (faster-whisper's rule; openai/whisper keeps the last). attempts: not empty.
size_t best_attempt(std::span<const DecodedChunk> attempts, const QualityThresholds& thresholds = {});

}  // namespace prism::pipelines::transcribe

// pipelines/transcribe/transcript.h: what a transcription produces and what it was asked for.
// Plain data shared by the long-form orchestrator, the live sessions, the api's response
// formats (json, text, srt, vtt, verbose_json) and `prism transcribe`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frontends/speech_processor.h"

namespace prism::pipelines::transcribe {

struct TranscribeOptions {
  frontends::SpeechTask task = frontends::SpeechTask::transcribe;
  std::optional<std::string> language;  // checked by SpeechProcessor::check_language; none: detect
  std::string prompt;                   // OpenAI `prompt`: conditions the first chunk's decode
  // OpenAI `temperature`: 0 (the default) decodes greedily and falls back through 0.2, 0.4, ...
  // 1.0 for chunks that fail the checks (quality.h); a positive value starts there.
  float temperature = 0.0f;
  // false: one decode per chunk at `temperature`, whatever its checks say (benchmarks with
  // random weights, whose decodes would all fail them).
  bool temperature_fallback = true;
  bool timestamps = true;  // segment timestamps (<|notimestamps|> when false: one segment a chunk)
  // Fixed decode length for benchmarks with random weights: stop after exactly this many
  // tokens per chunk (ignore end-of-text); 0 = the model decides.
  int fixed_tokens_per_chunk = 0;
};

struct Segment {
  int id = 0;
  int64_t seek = 0;     // the chunk's first sample (verbose_json's seek, in mel frames: / 160)
  double start = 0, end = 0;  // seconds in the original audio
  std::string text;
  std::vector<int32_t> tokens;
  float temperature = 0;
  float avg_logprob = 0;
  float compression_ratio = 0;
  float no_speech_prob = 0;
};

struct TranscriptStats {
  double audio_seconds = 0;
  double speech_seconds = 0;   // inside VAD spans
  int chunks = 0;
  int rerun_chunks = 0;        // chunks decoded again at a higher temperature
  int silent_chunks = 0;       // dropped as no speech
  int64_t decoded_tokens = 0;  // every decode, re-runs included
};

struct Transcript {
  std::string language;  // detected or given
  double duration = 0;   // seconds of audio
  std::string text;      // segments' texts joined
  std::vector<Segment> segments;  // time order
  TranscriptStats stats;
};

}  // namespace prism::pipelines::transcribe

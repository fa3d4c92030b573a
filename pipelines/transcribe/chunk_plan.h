// pipelines/transcribe/chunk_plan.h: long-form audio cut into decodable chunks, as
// faster-whisper's batched pipeline and WhisperX do — VAD speech spans merged greedily, in
// order, into chunks of at most max_chunk_seconds (30 s: Whisper's window) — with the
// guarantee they lack: every speech span lands in exactly one chunk. A span longer than the
// window is first cut into window-sized pieces (each piece then counts as a span), so nothing
// is dropped. A chunk covers [first span's start, last span's end); the silence between its
// spans stays in (the decoder sees real time), so timestamps map back by adding the start.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "media/speech_spans.h"

namespace prism::pipelines::transcribe {

struct Chunk {
  int64_t start = 0, end = 0;  // samples of the original audio, end exclusive
  std::vector<media::SpeechSpan> spans;  // the speech spans (or span pieces) it holds, in order
};

// spans: ascending, disjoint (media::speech_spans); empty ones (end <= start) hold no audio
// and are skipped. max_chunk_samples > 0. Chunks ascending, disjoint, each at most
// max_chunk_samples long.
std::vector<Chunk> plan_chunks(std::span<const media::SpeechSpan> spans, int64_t max_chunk_samples);

}  // namespace prism::pipelines::transcribe

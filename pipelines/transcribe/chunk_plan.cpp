// pipelines/transcribe/chunk_plan.cpp: VAD spans → decodable chunks. Pure: no audio, no model.
#include "pipelines/transcribe/chunk_plan.h"

#include <algorithm>

#include "base/check.h"

namespace prism::pipelines::transcribe {

// NOTE: every span with samples lands in exactly one chunk, whole or as consecutive pieces
// that tile it; no chunk is longer than max_chunk_samples; chunks are ascending and disjoint.
// Greedy in order: a span (or piece) joins the open chunk when the chunk, stretched to the
// span's end, stays within the limit; else it opens the next chunk. A span longer than the
// limit is first cut into pieces of exactly the limit (the last one shorter), so a piece
// always fits a chunk of its own. Empty spans (end <= start) hold no audio and are skipped.
std::vector<Chunk> plan_chunks(std::span<const media::SpeechSpan> spans, int64_t max_chunk_samples) {
  PRISM_CHECK(max_chunk_samples > 0);
  std::vector<Chunk> chunks;
  auto place = [&](media::SpeechSpan piece) {
    if (!chunks.empty() && piece.end - chunks.back().start <= max_chunk_samples) {
      Chunk& open = chunks.back();
      PRISM_CHECK_MSG(piece.start >= open.end, "speech spans must be ascending and disjoint");
      open.end = piece.end;
      open.spans.push_back(piece);
      return;
    }
    PRISM_CHECK_MSG(chunks.empty() || piece.start >= chunks.back().end, "speech spans must be ascending and disjoint");
    chunks.push_back(Chunk{piece.start, piece.end, {piece}});
  };
  for (const media::SpeechSpan& span : spans) {
    for (int64_t start = span.start; start < span.end; start += max_chunk_samples)
      place({start, std::min(span.end, start + max_chunk_samples)});
  }
  return chunks;
}

}  // namespace prism::pipelines::transcribe

// plan_chunks: the "nothing dropped" property over thousands of random span sets (every span
// or piece in exactly one chunk, pieces tiling their span, chunks within the limit, ascending
// and disjoint), and the hand cases: a span ending exactly at a chunk's limit, a 45 s span,
// adjacent spans, empty input.
#include "pipelines/transcribe/chunk_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace prism::pipelines::transcribe {
namespace {

using media::SpeechSpan;

constexpr int64_t kRate = 16000;
constexpr int64_t k30s = 30 * kRate;

// Checks every invariant plan_chunks promises.
void expect_plan_valid(const std::vector<SpeechSpan>& spans, const std::vector<Chunk>& chunks, int64_t max) {
  // Chunks: non-empty, within the limit, covering exactly their pieces, ascending, disjoint.
  std::vector<SpeechSpan> pieces;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& chunk = chunks[c];
    ASSERT_FALSE(chunk.spans.empty()) << "chunk " << c;
    ASSERT_LT(chunk.start, chunk.end) << "chunk " << c;
    ASSERT_LE(chunk.end - chunk.start, max) << "chunk " << c;
    ASSERT_EQ(chunk.start, chunk.spans.front().start) << "chunk " << c;
    ASSERT_EQ(chunk.end, chunk.spans.back().end) << "chunk " << c;
    if (c > 0) ASSERT_LE(chunks[c - 1].end, chunk.start) << "chunk " << c;
    for (const SpeechSpan& p : chunk.spans) {
      ASSERT_LT(p.start, p.end);
      ASSERT_LE(p.end - p.start, max);
      if (!pieces.empty()) ASSERT_LE(pieces.back().end, p.start);
      pieces.push_back(p);
    }
  }
  // Pieces, in order, tile the non-empty spans exactly: each span is one piece or consecutive
  // pieces that start at its start, meet end to start, and end at its end.
  size_t k = 0;
  for (const SpeechSpan& s : spans) {
    if (s.end <= s.start) continue;
    ASSERT_LT(k, pieces.size()) << "span [" << s.start << ", " << s.end << ") is in no chunk";
    ASSERT_EQ(pieces[k].start, s.start) << "span [" << s.start << ", " << s.end << ")";
    int64_t at = s.start;
    while (k < pieces.size() && pieces[k].start == at && at < s.end) at = pieces[k++].end;
    ASSERT_EQ(at, s.end) << "span [" << s.start << ", " << s.end << ") not tiled";
  }
  ASSERT_EQ(k, pieces.size()) << "chunks hold pieces of no span";
}

TEST(ChunkPlan, RandomSpanSetsDropNothing) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 5000; ++trial) {
    // Span sets with short, long (> max) and adjacent spans, gaps from 0 to beyond a chunk.
    const int64_t max = std::uniform_int_distribution<int64_t>(1, 40)(rng) * kRate / 4;
    const int n = std::uniform_int_distribution<int>(0, 60)(rng);
    std::vector<SpeechSpan> spans;
    int64_t at = std::uniform_int_distribution<int64_t>(0, kRate)(rng);
    for (int i = 0; i < n; ++i) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      const int64_t len = kind == 0   ? std::uniform_int_distribution<int64_t>(max, 4 * max)(rng)  // long
                          : kind == 1 ? max                                                      // exactly max
                                      : std::uniform_int_distribution<int64_t>(1, max)(rng);
      const int64_t gap = kind == 2 ? 0 : std::uniform_int_distribution<int64_t>(0, max + kRate)(rng);
      spans.push_back({at + gap, at + gap + len});
      at += gap + len;
    }
    const std::vector<Chunk> chunks = plan_chunks(spans, max);
    ASSERT_NO_FATAL_FAILURE(expect_plan_valid(spans, chunks, max)) << "trial " << trial;
  }
}

TEST(ChunkPlan, Empty) { EXPECT_TRUE(plan_chunks({}, k30s).empty()); }

TEST(ChunkPlan, GreedyMergeInOrder) {
  // 10 s + 10 s + 10 s (gaps 1 s): the first two fit 30 s, the third would make 32 s.
  const std::vector<SpeechSpan> spans = {{0, 10 * kRate}, {11 * kRate, 21 * kRate}, {22 * kRate, 32 * kRate}};
  const std::vector<Chunk> chunks = plan_chunks(spans, k30s);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].start, 0);
  EXPECT_EQ(chunks[0].end, 21 * kRate);
  EXPECT_EQ(chunks[0].spans.size(), 2u);
  EXPECT_EQ(chunks[1].start, 22 * kRate);
  EXPECT_EQ(chunks[1].end, 32 * kRate);
}

TEST(ChunkPlan, SpanEndingExactlyAtTheLimitJoinsTheChunk) {
  // The second span ends exactly 30 s after the chunk's start: it fits (end exclusive).
  const std::vector<SpeechSpan> spans = {{kRate, 5 * kRate}, {20 * kRate, 31 * kRate}, {31 * kRate + 1, 32 * kRate}};
  const std::vector<Chunk> chunks = plan_chunks(spans, k30s);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].start, kRate);
  EXPECT_EQ(chunks[0].end, 31 * kRate);
  EXPECT_EQ(chunks[0].end - chunks[0].start, k30s);
  ASSERT_EQ(chunks[0].spans.size(), 2u);
  EXPECT_EQ(chunks[1].start, 31 * kRate + 1);
  ASSERT_EQ(chunks[1].spans.size(), 1u);
}

TEST(ChunkPlan, FortyFiveSecondSpanIsCutIntoPieces) {
  // A 45 s span becomes a 30 s piece and a 15 s piece; the 15 s piece shares its chunk with
  // the next span (2 s later, 5 s long: 22 s together).
  const std::vector<SpeechSpan> spans = {{kRate, 46 * kRate}, {48 * kRate, 53 * kRate}};
  const std::vector<Chunk> chunks = plan_chunks(spans, k30s);
  ASSERT_EQ(chunks.size(), 2u);
  ASSERT_EQ(chunks[0].spans.size(), 1u);
  EXPECT_EQ(chunks[0].start, kRate);
  EXPECT_EQ(chunks[0].end, 31 * kRate);
  ASSERT_EQ(chunks[1].spans.size(), 2u);
  EXPECT_EQ(chunks[1].spans[0].start, 31 * kRate);
  EXPECT_EQ(chunks[1].spans[0].end, 46 * kRate);
  EXPECT_EQ(chunks[1].spans[1].start, 48 * kRate);
  EXPECT_EQ(chunks[1].end, 53 * kRate);
  ASSERT_NO_FATAL_FAILURE(expect_plan_valid(spans, chunks, k30s));
}

TEST(ChunkPlan, ExactMultipleOfTheLimitMakesWholePieces) {
  const std::vector<SpeechSpan> spans = {{0, 2 * k30s}};
  const std::vector<Chunk> chunks = plan_chunks(spans, k30s);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].end, k30s);
  EXPECT_EQ(chunks[1].start, k30s);
  EXPECT_EQ(chunks[1].end, 2 * k30s);
}

TEST(ChunkPlan, AdjacentSpansStayDistinctInOneChunk) {
  // Spans that touch (end == next start) merge into one chunk and stay separate spans.
  const std::vector<SpeechSpan> spans = {{0, kRate}, {kRate, 2 * kRate}, {2 * kRate, 3 * kRate}};
  const std::vector<Chunk> chunks = plan_chunks(spans, k30s);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].start, 0);
  EXPECT_EQ(chunks[0].end, 3 * kRate);
  EXPECT_EQ(chunks[0].spans.size(), 3u);
}

TEST(ChunkPlan, AdjacentSpansAcrossTheLimitSplitAtTheirBoundary) {
  // 20 s then an adjacent 20 s: 40 s together, so the second opens the next chunk.
  const std::vector<SpeechSpan> spans = {{0, 20 * kRate}, {20 * kRate, 40 * kRate}};
  const std::vector<Chunk> chunks = plan_chunks(spans, k30s);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].end, 20 * kRate);
  EXPECT_EQ(chunks[1].start, 20 * kRate);
}

TEST(ChunkPlan, EmptySpansAreSkipped) {
  const std::vector<SpeechSpan> spans = {{kRate, kRate}, {2 * kRate, 3 * kRate}};
  const std::vector<Chunk> chunks = plan_chunks(spans, k30s);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].start, 2 * kRate);
}

}  // namespace
}  // namespace prism::pipelines::transcribe

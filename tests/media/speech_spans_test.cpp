// media::speech_spans (Silero's get_speech_timestamps rules) on hand-made probability
// sequences with spans worked out by hand from those rules, and StreamingEndpointer against
// speech_spans on the same sequences (hand-made and random).
#include "media/speech_spans.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace prism::media {

bool operator==(const SpeechSpan& a, const SpeechSpan& b) { return a.start == b.start && a.end == b.end; }
void PrintTo(const SpeechSpan& s, std::ostream* os) { *os << "[" << s.start << ", " << s.end << ")"; }

namespace {

constexpr int64_t W = kVadWindow;

// One window per character: 'S' speech (0.9), '.' silence (0.1), 'm' between the thresholds
// (0.4: above neg_threshold 0.35, below threshold 0.5 with the defaults).
std::vector<float> pattern(const std::string& p) {
  std::vector<float> probs;
  for (char c : p) probs.push_back(c == 'S' ? 0.9f : c == 'm' ? 0.4f : 0.1f);
  return probs;
}

std::string repeat(char c, int n) { return std::string(size_t(n), c); }

std::vector<SpeechSpan> spans_of(const std::string& p, const VadParams& params = {}) {
  return speech_spans(pattern(p), int64_t(p.size()) * W, params);
}

TEST(SpeechSpans, OneSpanIsClosedAfterMinSilenceAndPadded) {
  // Speech from window 5; the silence begins at window 25 and reaches 100 ms (1600 samples)
  // at window 29 (4 windows = 2048 samples later), which closes [5, 25) windows; 30 ms pads.
  const auto spans = spans_of(repeat('.', 5) + repeat('S', 20) + repeat('.', 10));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0], (SpeechSpan{5 * W - 480, 25 * W + 480}));
}

TEST(SpeechSpans, SpansOfMinSpeechOrLessAreDropped) {
  // 7 windows = 3584 samples <= 4000 (250 ms): dropped; 8 windows = 4096 > 4000: kept.
  EXPECT_TRUE(spans_of(repeat('.', 5) + repeat('S', 7) + repeat('.', 10)).empty());
  const auto kept = spans_of(repeat('.', 5) + repeat('S', 8) + repeat('.', 10));
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0], (SpeechSpan{5 * W - 480, 13 * W + 480}));
}

TEST(SpeechSpans, PausesShorterThanMinSilenceAreBridged) {
  // 4 silent windows: the 4th is 1536 samples after the silence began (< 1600): one span.
  const auto bridged = spans_of(repeat('.', 5) + repeat('S', 10) + repeat('.', 4) + repeat('S', 10) + repeat('.', 10));
  ASSERT_EQ(bridged.size(), 1u);
  EXPECT_EQ(bridged[0], (SpeechSpan{5 * W - 480, 29 * W + 480}));
  // 5 silent windows: the 5th is 2048 samples in: two spans.
  const auto split = spans_of(repeat('.', 5) + repeat('S', 10) + repeat('.', 5) + repeat('S', 10) + repeat('.', 10));
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0], (SpeechSpan{5 * W - 480, 15 * W + 480}));
  EXPECT_EQ(split[1], (SpeechSpan{20 * W - 480, 30 * W + 480}));
}

TEST(SpeechSpans, HysteresisBandNeitherStartsNorEndsSpeech) {
  // Between neg_threshold and threshold: no start before speech, no silence after it.
  const auto spans = spans_of(repeat('m', 6) + repeat('S', 10) + repeat('m', 12) + repeat('.', 8));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0], (SpeechSpan{6 * W - 480, 28 * W + 480}));
  // With neg_threshold set above the band, the band is silence.
  VadParams params;
  params.neg_threshold = 0.45f;
  const auto strict = spans_of(repeat('m', 6) + repeat('S', 10) + repeat('m', 12) + repeat('.', 8), params);
  ASSERT_EQ(strict.size(), 1u);
  EXPECT_EQ(strict[0], (SpeechSpan{6 * W - 480, 16 * W + 480}));
  // A lower threshold makes the band speech.
  params = {};
  params.threshold = 0.3f;  // neg_threshold 0.15
  const auto low = spans_of(repeat('m', 6) + repeat('S', 10) + repeat('m', 12) + repeat('.', 8), params);
  ASSERT_EQ(low.size(), 1u);
  EXPECT_EQ(low[0], (SpeechSpan{0, 28 * W + 480}));
}

TEST(SpeechSpans, CloseSpansSplitTheGapBetweenTheirPads) {
  // pad 100 ms (1600) and min_silence 50 ms (800): 3 silent windows (1536 samples) close a
  // span, and the gap to the next is 1536 < 2 * 1600, so each side gets 768.
  VadParams params;
  params.speech_pad_ms = 100;
  params.min_silence_ms = 50;
  const auto spans = spans_of(repeat('.', 10) + repeat('S', 10) + repeat('.', 3) + repeat('S', 10) + repeat('.', 10), params);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0], (SpeechSpan{10 * W - 1600, 20 * W + 768}));
  EXPECT_EQ(spans[1], (SpeechSpan{23 * W - 768, 33 * W + 1600}));
}

TEST(SpeechSpans, PaddingStopsAtTheEdgesOfTheAudio) {
  // Speech from the first window to the end: [0, total), the last window partial.
  const int64_t total = 10 * W + 100;
  const auto spans = speech_spans(pattern(repeat('S', 11)), total, {});
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0], (SpeechSpan{0, total}));
}

TEST(SpeechSpans, SpanOpenAtTheEndIsKeptIfLongEnough) {
  // Still in speech at the end (a trailing pause shorter than min_silence counts as speech).
  const auto open = spans_of(repeat('.', 4) + repeat('S', 9) + repeat('.', 3));
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0], (SpeechSpan{4 * W - 480, 16 * W}));
  // From its start to the end 8 windows = 4096 > 4000: kept; 7 windows: dropped.
  EXPECT_EQ(spans_of(repeat('.', 8) + repeat('S', 2) + repeat('.', 3) + repeat('S', 1) + "..").size(), 1u);
  EXPECT_TRUE(spans_of(repeat('.', 8) + repeat('S', 2) + repeat('.', 3) + repeat('S', 1) + ".").empty());
}

TEST(SpeechSpans, MaxSpeechSplitsAtTheLastLongPause) {
  // max_speech_s 1: a span is split once it is longer than 16000 - 512 - 2 * 480 = 14528.
  // Speech from window 2, a pause of 4 windows (2048 samples > 98 ms) at 12..15, speech from
  // 16 to 36, silence after. At window 31 (31 * 512 - 1024 > 14528) the span is split at the
  // pause: [2, 12) windows, and the next begins where speech came back (16) and ends at 37.
  VadParams params;
  params.max_speech_s = 1.0;
  const std::string p = repeat('.', 2) + repeat('S', 10) + repeat('.', 4) + repeat('S', 21) + repeat('.', 13);
  const auto spans = spans_of(p, params);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0], (SpeechSpan{2 * W - 480, 12 * W + 480}));
  EXPECT_EQ(spans[1], (SpeechSpan{16 * W - 480, 37 * W + 480}));
  // Without the limit, one span.
  const auto whole = spans_of(p);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0], (SpeechSpan{2 * W - 480, 37 * W + 480}));
}

TEST(SpeechSpans, MaxSpeechSplitsTheLastOfSeveralPauses) {
  // Pauses of 4 windows at 8..11 and 20..23; the span is split at the second (the last one
  // before the limit is reached at window 29: 29 * 512 = 14848 > 14528).
  VadParams params;
  params.max_speech_s = 1.0;
  const std::string p = repeat('S', 8) + repeat('.', 4) + repeat('S', 8) + repeat('.', 4) + repeat('S', 10) + repeat('.', 10);
  const auto spans = spans_of(p, params);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0], (SpeechSpan{0, 20 * W + 480}));
  EXPECT_EQ(spans[1], (SpeechSpan{24 * W - 480, 34 * W + 480}));
}

TEST(SpeechSpans, MaxSpeechWithoutAPauseCutsHard) {
  // Continuous speech over 60 windows, max 1 s: cut at window 29 (14848 > 14528); window 29
  // starts nothing (Silero skips the window it cuts at), speech restarts at 30 and is cut
  // again at 59 (59 * 512 - 30 * 512 = 14848). The gap of 512 < 960 is split in halves.
  VadParams params;
  params.max_speech_s = 1.0;
  const auto spans = spans_of(repeat('S', 60), params);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0], (SpeechSpan{0, 29 * W + 256}));
  EXPECT_EQ(spans[1], (SpeechSpan{30 * W - 256, 59 * W + 480}));
}

TEST(SpeechSpans, ShortPausesDoNotCountForTheSplit) {
  // A pause of 3 windows (1536 samples, not > 1568) is no place to split: the cut is hard.
  VadParams params;
  params.max_speech_s = 1.0;
  const auto spans = spans_of(repeat('S', 10) + repeat('.', 3) + repeat('S', 30) + repeat('.', 10), params);
  ASSERT_GE(spans.size(), 1u);
  EXPECT_EQ(spans[0].end, 29 * W + 256);
}

TEST(SpeechSpans, DegenerateInputs) {
  EXPECT_TRUE(speech_spans({}, 1000, {}).empty());
  EXPECT_TRUE(speech_spans(pattern(repeat('S', 20)), 0, {}).empty());
  EXPECT_TRUE(spans_of(repeat('.', 50)).empty());
  // More probabilities than windows of audio: the extra ones are ignored.
  const auto spans = speech_spans(pattern(repeat('S', 100)), 20 * W, {});
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0], (SpeechSpan{0, 20 * W}));
  // NaN probabilities are neither speech nor silence.
  std::vector<float> probs = pattern(repeat('S', 10) + repeat('.', 10));
  probs[3] = std::nanf("");
  EXPECT_EQ(speech_spans(probs, 20 * W, {}).size(), 1u);
}

// ---- StreamingEndpointer ------------------------------------------------------------------

// The endpointer's events over the whole sequence (then finish), as spans.
std::vector<SpeechSpan> endpointed_spans(const std::vector<float>& probs, int64_t total, const VadParams& params) {
  StreamingEndpointer endpointer(params);
  std::vector<StreamingEndpointer::Change> changes;
  for (float p : probs) {
    if (auto change = endpointer.push(p)) changes.push_back(*change);
  }
  for (const auto& change : endpointer.finish(total)) changes.push_back(change);
  EXPECT_FALSE(endpointer.in_speech());
  std::vector<SpeechSpan> spans;
  for (size_t i = 0; i < changes.size(); ++i) {
    const bool started = changes[i].event == StreamingEndpointer::Event::speech_started;
    EXPECT_EQ(started, i % 2 == 0) << "events alternate, starting with speech_started";
    if (started) spans.push_back({changes[i].sample, -1});
    else if (!spans.empty()) spans.back().end = changes[i].sample;
  }
  return spans;
}

TEST(StreamingEndpointer, ReportsTheSpansOfSpeechSpansOnHandMadeSequences) {
  const std::vector<std::string> sequences = {
      repeat('.', 5) + repeat('S', 20) + repeat('.', 10),
      repeat('.', 5) + repeat('S', 7) + repeat('.', 10),
      repeat('.', 5) + repeat('S', 8) + repeat('.', 10),
      repeat('.', 5) + repeat('S', 10) + repeat('.', 4) + repeat('S', 10) + repeat('.', 10),
      repeat('.', 5) + repeat('S', 10) + repeat('.', 5) + repeat('S', 10) + repeat('.', 10),
      repeat('m', 6) + repeat('S', 10) + repeat('m', 12) + repeat('.', 8),
      repeat('S', 30),
      repeat('.', 4) + repeat('S', 9) + repeat('.', 3),
      repeat('.', 8) + repeat('S', 2) + repeat('.', 3) + repeat('S', 1) + "..",
      repeat('S', 3) + repeat('.', 6) + repeat('S', 12) + repeat('.', 6) + repeat('S', 2) + repeat('.', 8),
  };
  for (const std::string& p : sequences) {
    SCOPED_TRACE(p);
    const int64_t total = int64_t(p.size()) * W;
    EXPECT_EQ(endpointed_spans(pattern(p), total, {}), speech_spans(pattern(p), total, {}));
  }
}

TEST(StreamingEndpointer, AnnouncesSpeechOnceItOutlastsMinSpeech) {
  StreamingEndpointer endpointer({});
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(endpointer.push(0.1f));
  // Speech from window 3 (sample 1536): 250 ms = 4000 samples are certain after the window
  // ending at 1536 + 4096, i.e. window 10.
  for (int i = 3; i < 10; ++i) EXPECT_FALSE(endpointer.push(0.9f)) << i;
  auto started = endpointer.push(0.9f);
  ASSERT_TRUE(started);
  EXPECT_EQ(started->event, StreamingEndpointer::Event::speech_started);
  EXPECT_EQ(started->sample, 3 * W - 480);
  EXPECT_TRUE(endpointer.in_speech());
  // Silence from window 11: closed at window 15 (2048 samples in), at 11 * 512 + 480.
  for (int i = 11; i < 15; ++i) EXPECT_FALSE(endpointer.push(0.1f)) << i;
  auto stopped = endpointer.push(0.1f);
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->event, StreamingEndpointer::Event::speech_stopped);
  EXPECT_EQ(stopped->sample, 11 * W + 480);
  EXPECT_FALSE(endpointer.in_speech());
  EXPECT_EQ(endpointer.windows(), 16);
  EXPECT_TRUE(endpointer.finish(16 * W).empty());
}

TEST(StreamingEndpointer, MatchesSpeechSpansOnRandomSequences) {
  // Markov speech / silence with noisy probabilities (band values included), several
  // parameter sets that keep gaps >= 2 * pad (min_silence_ms + 32 >= 2 * speech_pad_ms) and
  // min_silence_ms >= speech_pad_ms (so a padded end never passes the audio's end).
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<VadParams> param_sets(4);
  param_sets[1].min_speech_ms = 64, param_sets[1].min_silence_ms = 64, param_sets[1].speech_pad_ms = 48;
  param_sets[2].threshold = 0.6f, param_sets[2].neg_threshold = 0.3f, param_sets[2].min_silence_ms = 300,
  param_sets[2].speech_pad_ms = 150;
  param_sets[3].min_speech_ms = 0, param_sets[3].min_silence_ms = 0, param_sets[3].speech_pad_ms = 0;
  int spans_compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<float> probs(size_t(50 + trial % 200));
    bool speech = false;
    for (float& p : probs) {
      if (uniform(rng) < 0.15f) speech = !speech;
      const float centre = speech ? 0.75f : 0.2f;
      p = std::clamp(centre + (uniform(rng) - 0.5f) * 0.7f, 0.0f, 1.0f);
    }
    const VadParams& params = param_sets[size_t(trial) % param_sets.size()];
    const int64_t total = int64_t(probs.size()) * W;
    const auto expected = speech_spans(probs, total, params);
    ASSERT_EQ(endpointed_spans(probs, total, params), expected) << "trial " << trial;
    spans_compared += int(expected.size());
  }
  EXPECT_GT(spans_compared, 1000);
}

TEST(StreamingEndpointer, NeverStartsBeforeThePreviousStop) {
  // pad 200 ms with min_silence 50 ms: speech_spans would split short gaps in halves; the
  // endpointer has already reported the stop, so the next start is clamped to it.
  VadParams params;
  params.speech_pad_ms = 200;
  params.min_silence_ms = 50;
  const std::string p = repeat('.', 20) + repeat('S', 10) + repeat('.', 3) + repeat('S', 10) + repeat('.', 20);
  const auto spans = endpointed_spans(pattern(p), int64_t(p.size()) * W, params);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0], (SpeechSpan{20 * W - 3200, 30 * W + 3200}));
  EXPECT_EQ(spans[1], (SpeechSpan{30 * W + 3200, 43 * W + 3200}));
}

}  // namespace
}  // namespace prism::media

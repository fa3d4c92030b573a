// The transcript renderers on hand-built transcripts, as exact strings: json, text, srt, vtt
// and verbose_json (times over an hour, the empty transcript, UTF-8 and invalid bytes, JSON and
// cue escaping), whisper's timestamp rounding, the billed seconds, language names, the stream's
// events.
#include "api/routes/transcript_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace prism::api {
namespace {

using pipelines::transcribe::Segment;
using pipelines::transcribe::Transcript;

Segment segment(int id, int64_t seek, double start, double end, std::string text, std::vector<int32_t> tokens = {}) {
  Segment s;
  s.id = id;
  s.seek = seek;
  s.start = start;
  s.end = end;
  s.text = std::move(text);
  s.tokens = std::move(tokens);
  return s;
}

// Two segments, the second past the hour, with markup, an arrow and a line break in its text.
Transcript two_segments() {
  Transcript t;
  t.language = "en";
  t.duration = 3725.3;
  Segment a = segment(0, 0, 0.0, 3.32, " The beach was a popular spot.", {50364, 440, 50530});
  a.temperature = 0.0f;
  a.avg_logprob = -0.2860786f;
  a.compression_ratio = 1.2363636f;
  a.no_speech_prob = 0.00985979f;
  Segment b = segment(1, 3661 * 16000, 3661.5, 3725.25, " <b>Fish & chips</b> --> here\n next line", {50364});
  b.temperature = 0.2f;
  b.avg_logprob = -1.5f;
  b.compression_ratio = 2.5f;
  b.no_speech_prob = 0.5f;
  t.segments = {a, b};
  t.text = "The beach was a popular spot. <b>Fish & chips</b> --> here\n next line";
  t.stats.audio_seconds = 3725.3;
  t.stats.speech_seconds = 67.0625;
  t.stats.chunks = 2;
  t.stats.rerun_chunks = 1;
  t.stats.silent_chunks = 0;
  t.stats.decoded_tokens = 42;
  return t;
}

TEST(TranscriptFormat, FormatNamesAndContentTypes) {
  for (const char* name : {"json", "text", "srt", "vtt", "verbose_json"}) {
    const std::optional<TranscriptFormat> f = parse_transcript_format(name);
    ASSERT_TRUE(f.has_value()) << name;
    EXPECT_EQ(transcript_format_name(*f), name);
  }
  EXPECT_FALSE(parse_transcript_format("JSON").has_value());
  EXPECT_FALSE(parse_transcript_format("").has_value());
  EXPECT_FALSE(parse_transcript_format("verbose-json").has_value());
  EXPECT_EQ(transcript_content_type(TranscriptFormat::json), "application/json");
  EXPECT_EQ(transcript_content_type(TranscriptFormat::verbose_json), "application/json");
  EXPECT_EQ(transcript_content_type(TranscriptFormat::text), "text/plain; charset=utf-8");
  EXPECT_EQ(transcript_content_type(TranscriptFormat::srt), "text/plain; charset=utf-8");
  EXPECT_EQ(transcript_content_type(TranscriptFormat::vtt), "text/plain; charset=utf-8");
}

TEST(TranscriptFormat, CueTimestampsAsWhisperFormatsThem) {
  EXPECT_EQ(format_cue_timestamp(0.0, ','), "00:00:00,000");
  EXPECT_EQ(format_cue_timestamp(3.32, ','), "00:00:03,320");
  EXPECT_EQ(format_cue_timestamp(3.32, '.'), "00:00:03.320");
  EXPECT_EQ(format_cue_timestamp(59.9996, ','), "00:01:00,000");  // rounding carries into the minute
  EXPECT_EQ(format_cue_timestamp(3661.5, ','), "01:01:01,500");
  EXPECT_EQ(format_cue_timestamp(360000.0, '.'), "100:00:00.000");  // hours are not capped at two digits
  EXPECT_EQ(format_cue_timestamp(1.0625, ','), "00:00:01,062");   // Python's round(): half to even
  EXPECT_EQ(format_cue_timestamp(1.1875, ','), "00:00:01,188");
  EXPECT_EQ(format_cue_timestamp(-1.0, ','), "00:00:00,000");
  EXPECT_EQ(format_cue_timestamp(std::nan(""), ','), "00:00:00,000");
  EXPECT_EQ(format_cue_timestamp(std::numeric_limits<double>::infinity(), ','), "00:00:00,000");
}

TEST(TranscriptFormat, BilledSecondsRoundUp) {
  EXPECT_EQ(billed_seconds(0.0), 0);
  EXPECT_EQ(billed_seconds(11.0), 11);
  EXPECT_EQ(billed_seconds(176000.0 / 16000.0), 11);
  EXPECT_EQ(billed_seconds(11.2), 12);
  EXPECT_EQ(billed_seconds(0.01), 1);
  EXPECT_EQ(billed_seconds(-3.0), 0);
  EXPECT_EQ(billed_seconds(std::nan("")), 0);
}

TEST(TranscriptFormat, LanguageNames) {
  EXPECT_EQ(language_name("en"), "english");
  EXPECT_EQ(language_name("fr"), "french");
  EXPECT_EQ(language_name("ht"), "haitian creole");
  EXPECT_EQ(language_name("yue"), "cantonese");
  EXPECT_EQ(language_name("xx"), "xx");
  EXPECT_EQ(language_name(""), "");
}

TEST(TranscriptFormat, Json) {
  EXPECT_EQ(transcript_json(two_segments()),
            R"({"text":"The beach was a popular spot. <b>Fish & chips</b> --> here\n next line",)"
            R"("usage":{"type":"duration","seconds":3726}})");
  EXPECT_EQ(render_transcript(two_segments(), TranscriptFormat::json), transcript_json(two_segments()));
}

TEST(TranscriptFormat, Text) {
  EXPECT_EQ(transcript_text(two_segments()), "The beach was a popular spot. <b>Fish & chips</b> --> here\n next line\n");
  EXPECT_EQ(render_transcript(two_segments(), TranscriptFormat::text), transcript_text(two_segments()));
}

TEST(TranscriptFormat, Srt) {
  EXPECT_EQ(transcript_srt(two_segments()),
            "1\n"
            "00:00:00,000 --> 00:00:03,320\n"
            "The beach was a popular spot.\n"
            "\n"
            "2\n"
            "01:01:01,500 --> 01:02:05,250\n"
            "<b>Fish & chips</b> -> here next line\n"
            "\n");
  EXPECT_EQ(render_transcript(two_segments(), TranscriptFormat::srt), transcript_srt(two_segments()));
}

TEST(TranscriptFormat, Vtt) {
  EXPECT_EQ(transcript_vtt(two_segments()),
            "WEBVTT\n"
            "\n"
            "00:00:00.000 --> 00:00:03.320\n"
            "The beach was a popular spot.\n"
            "\n"
            "01:01:01.500 --> 01:02:05.250\n"
            "&lt;b&gt;Fish &amp; chips&lt;/b&gt; -&gt; here next line\n"
            "\n");
  EXPECT_EQ(render_transcript(two_segments(), TranscriptFormat::vtt), transcript_vtt(two_segments()));
}

TEST(TranscriptFormat, VerboseJson) {
  TranscriptRendering r;
  r.language_name = "english";
  EXPECT_EQ(transcript_verbose_json(two_segments(), r),
            R"({"task":"transcribe","language":"english","duration":3725.3,)"
            R"("text":"The beach was a popular spot. <b>Fish & chips</b> --> here\n next line",)"
            R"("segments":[)"
            R"({"id":0,"seek":0,"start":0.0,"end":3.32,"text":" The beach was a popular spot.",)"
            R"("tokens":[50364,440,50530],"temperature":0.0,"avg_logprob":-0.2860786,)"
            R"("compression_ratio":1.2363636,"no_speech_prob":0.00985979},)"
            R"({"id":1,"seek":366100,"start":3661.5,"end":3725.25,)"
            R"("text":" <b>Fish & chips</b> --> here\n next line","tokens":[50364],"temperature":0.2,)"
            R"("avg_logprob":-1.5,"compression_ratio":2.5,"no_speech_prob":0.5}],)"
            R"("usage":{"type":"duration","seconds":3726},)"
            R"("prism":{"chunks":2,"rerun_chunks":1,"silent_chunks":0,"speech_seconds":67.062,"decoded_tokens":42}})");
  // A translation's language is the output's.
  r.task = frontends::SpeechTask::translate;
  r.language_name = "french";
  const std::string translated = render_transcript(two_segments(), TranscriptFormat::verbose_json, r);
  EXPECT_EQ(translated.rfind(R"({"task":"translate","language":"english","duration":3725.3,)", 0), 0u) << translated;
}

TEST(TranscriptFormat, EmptyTranscript) {
  Transcript t;  // no speech found: no segments, no text
  t.duration = 2.5;
  EXPECT_EQ(transcript_json(t), R"({"text":"","usage":{"type":"duration","seconds":3}})");
  EXPECT_EQ(transcript_text(t), "\n");
  EXPECT_EQ(transcript_srt(t), "");
  EXPECT_EQ(transcript_vtt(t), "WEBVTT\n\n");
  EXPECT_EQ(transcript_verbose_json(t, {}),
            R"({"task":"transcribe","language":"","duration":2.5,"text":"","segments":[],)"
            R"("usage":{"type":"duration","seconds":3},)"
            R"("prism":{"chunks":0,"rerun_chunks":0,"silent_chunks":0,"speech_seconds":0.0,"decoded_tokens":0}})");
}

TEST(TranscriptFormat, SegmentsWithoutTextGetNoCueAndNumbersStayConsecutive) {
  Transcript t;
  t.segments = {segment(0, 0, 0.0, 1.0, "  "), segment(1, 0, 1.0, 2.0, " one"), segment(2, 0, 2.0, 3.0, "\n"),
                segment(3, 0, 3.0, 2.5, " two")};  // an end before its start is clamped to the start
  EXPECT_EQ(transcript_srt(t),
            "1\n00:00:01,000 --> 00:00:02,000\none\n\n"
            "2\n00:00:03,000 --> 00:00:03,000\ntwo\n\n");
  EXPECT_EQ(transcript_vtt(t),
            "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\none\n\n"
            "00:00:03.000 --> 00:00:03.000\ntwo\n\n");
}

TEST(TranscriptFormat, Utf8AndEscaping) {
  Transcript t;
  t.duration = 1.0;
  t.text = "¿Qué tal? 日本語 \"quoted\" back\\slash\ttab";
  t.segments = {segment(0, 0, 0.0, 1.0, " " + t.text)};
  EXPECT_EQ(transcript_json(t),
            "{\"text\":\"¿Qué tal? 日本語 \\\"quoted\\\" back\\\\slash\\ttab\","
            "\"usage\":{\"type\":\"duration\",\"seconds\":1}}");
  EXPECT_EQ(transcript_srt(t), "1\n00:00:00,000 --> 00:00:01,000\n¿Qué tal? 日本語 \"quoted\" back\\slash\ttab\n\n");
  EXPECT_EQ(transcript_text(t), t.text + "\n");

  // Bytes that are not UTF-8 (a model may decode half a character) become U+FFFD in JSON.
  t.text = "ok \xff end";
  EXPECT_EQ(transcript_json(t), "{\"text\":\"ok \xEF\xBF\xBD end\",\"usage\":{\"type\":\"duration\",\"seconds\":1}}");
  EXPECT_EQ(transcript_done_event(t),
            "{\"type\":\"transcript.text.done\",\"text\":\"ok \xEF\xBF\xBD end\","
            "\"usage\":{\"type\":\"duration\",\"seconds\":1}}");
}

TEST(TranscriptFormat, NonFiniteStatisticsAreNull) {
  Transcript t;
  Segment s = segment(0, 160, 0.0, 1.0, " x");
  s.avg_logprob = -std::numeric_limits<float>::infinity();
  s.compression_ratio = std::nanf("");
  t.segments = {s};
  const std::string v = transcript_verbose_json(t, {});
  EXPECT_NE(v.find(R"("seek":1,)"), std::string::npos) << v;
  EXPECT_NE(v.find(R"("avg_logprob":null,"compression_ratio":null,)"), std::string::npos) << v;
}

TEST(TranscriptFormat, StreamEvents) {
  EXPECT_EQ(transcript_delta_event("Hi \"you\"\n"), R"({"type":"transcript.text.delta","delta":"Hi \"you\"\n"})");
  Transcript t;
  t.text = "Hello there.";
  t.duration = 11.0;
  EXPECT_EQ(transcript_done_event(t),
            R"({"type":"transcript.text.done","text":"Hello there.","usage":{"type":"duration","seconds":11}})");
}

}  // namespace
}  // namespace prism::api

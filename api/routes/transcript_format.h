// api/routes/transcript_format.h: a Transcript (pipelines/transcribe/transcript.h) rendered in
// OpenAI's response formats for /v1/audio/transcriptions and /v1/audio/translations, and
// `prism transcribe`'s output:
//   json          {"text", "usage": {"type": "duration", "seconds"}}
//   verbose_json  {"task", "language" (full name, "english"), "duration", "text", "segments":
//                  [{id, seek, start, end, text, tokens, temperature, avg_logprob,
//                  compression_ratio, no_speech_prob}], "usage", "prism": {chunk statistics}}
//   text          the text and a newline
//   srt           numbered cues, HH:MM:SS,mmm --> HH:MM:SS,mmm
//   vtt           "WEBVTT", cues HH:MM:SS.mmm --> HH:MM:SS.mmm, text escaped (&amp; &lt; &gt;)
// and the stream events (transcript.text.delta / transcript.text.done). Cue text is the
// segment's, trimmed, "-->" written "->" (as openai/whisper's writers do), line breaks joined
// into spaces (a blank line would end the cue); segments with no text get no cue.
// Pure functions of their arguments: no I/O, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pipelines/transcribe/transcript.h"

namespace prism::api {

enum class TranscriptFormat : uint8_t { json, text, srt, vtt, verbose_json };

// "json", "text", "srt", "vtt", "verbose_json" (exactly, as OpenAI); nullopt otherwise.
std::optional<TranscriptFormat> parse_transcript_format(std::string_view name);
std::string_view transcript_format_name(TranscriptFormat format);
// application/json for json and verbose_json; text/plain; charset=utf-8 for the others, as OpenAI.
std::string_view transcript_content_type(TranscriptFormat format);

// What a rendering needs beside the transcript.
struct TranscriptRendering {
  frontends::SpeechTask task = frontends::SpeechTask::transcribe;
  // verbose_json's "language": OpenAI writes the full lowercase name ("english"); a
  // translation's is always "english" (the output's language).
  std::string language_name;
};

std::string render_transcript(const pipelines::transcribe::Transcript& transcript, TranscriptFormat format,
                              const TranscriptRendering& rendering = {});

std::string transcript_json(const pipelines::transcribe::Transcript& transcript);
std::string transcript_verbose_json(const pipelines::transcribe::Transcript& transcript,
                                    const TranscriptRendering& rendering);
std::string transcript_text(const pipelines::transcribe::Transcript& transcript);
std::string transcript_srt(const pipelines::transcribe::Transcript& transcript);
std::string transcript_vtt(const pipelines::transcribe::Transcript& transcript);

// openai/whisper's format_timestamp with hours always: "01:02:03,456" (marker ','), Python's
// round() of the milliseconds (half to even); negative or non-finite times read 0.
std::string format_cue_timestamp(double seconds, char decimal_marker);

// Whole seconds billed for `seconds` of audio (rounded up, as OpenAI's usage.seconds).
int64_t billed_seconds(double seconds);

// openai/whisper's LANGUAGES name of an ISO code ("en" → "english", "yue" → "cantonese");
// an unknown code is returned as given.
// TODO(9): take it from frontends::SpeechProcessor once it exposes its table.
std::string language_name(std::string_view code);

// The stream's events (one SSE data payload each).
std::string transcript_delta_event(std::string_view delta);  // {"type":"transcript.text.delta","delta"}
std::string transcript_done_event(const pipelines::transcribe::Transcript& transcript);  // ...done, text, usage

}  // namespace prism::api

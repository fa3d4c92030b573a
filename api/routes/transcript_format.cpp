// api/routes/transcript_format.cpp: the renderers. JSON goes through nlohmann::ordered_json
// (OpenAI's key order; invalid UTF-8 a model may decode is replaced, never an exception);
// float statistics are written with the shortest digits that read back as the float (not the
// 17 of its widened double), times rounded to the millisecond as the cue formats have them.
#include "api/routes/transcript_format.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "frontends/speech_processor.h"

namespace prism::api {

namespace {

using pipelines::transcribe::Segment;
using pipelines::transcribe::Transcript;
using ojson = nlohmann::ordered_json;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// The float's shortest decimal, as a double that prints the same way; NaN and infinities: null.
ojson json_float(float value) {
  if (!std::isfinite(value)) return nullptr;
  std::array<char, 32> buf;
  const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  if (ec != std::errc()) return double(value);
  return std::strtod(std::string(buf.data(), end).c_str(), nullptr);
}

// Seconds rounded to the millisecond (cue precision); non-finite: 0.
double json_seconds(double seconds) {
  if (!std::isfinite(seconds)) return 0.0;
  return std::nearbyint(seconds * 1000.0) / 1000.0;
}

ojson usage_json(double seconds) { return ojson{{"type", "duration"}, {"seconds", billed_seconds(seconds)}}; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// A cue's text: trimmed, line breaks (with the spaces around them) joined into one space,
// "-->" written "->" (it would read as a timing line).
std::string cue_text(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && is_space(text[b])) ++b;
  while (e > b && is_space(text[e - 1])) --e;
  std::string out;
  out.reserve(e - b);
  for (size_t i = b; i < e; ++i) {
    const char c = text[i];
    if (c == '\n' || c == '\r') {
      while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
      while (i + 1 < e && is_space(text[i + 1])) ++i;
      out += ' ';
      continue;
    }
    out += c;
  }
  for (size_t at = out.find("-->"); at != std::string::npos; at = out.find("-->", at)) out.replace(at, 3, "->");
  return out;
}

std::string vtt_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out += c;
    }
  }
  return out;
}

// The cue's [start, end] with end never before start.
std::pair<double, double> cue_times(const Segment& s) {
  const double start = std::isfinite(s.start) ? std::max(0.0, s.start) : 0.0;
  const double end = std::isfinite(s.end) ? std::max(start, s.end) : start;
  return {start, end};
}

}  // namespace

std::optional<TranscriptFormat> parse_transcript_format(std::string_view name) {
  if (name == "json") return TranscriptFormat::json;
  if (name == "text") return TranscriptFormat::text;
  if (name == "srt") return TranscriptFormat::srt;
  if (name == "vtt") return TranscriptFormat::vtt;
  if (name == "verbose_json") return TranscriptFormat::verbose_json;
  return std::nullopt;
}

std::string_view transcript_format_name(TranscriptFormat format) {
  switch (format) {
    case TranscriptFormat::json: return "json";
    case TranscriptFormat::text: return "text";
    case TranscriptFormat::srt: return "srt";
    case TranscriptFormat::vtt: return "vtt";
    case TranscriptFormat::verbose_json: return "verbose_json";
  }
  return "json";
}

std::string_view transcript_content_type(TranscriptFormat format) {
  return format == TranscriptFormat::json || format == TranscriptFormat::verbose_json ? "application/json"
                                                                                       : "text/plain; charset=utf-8";
}

std::string render_transcript(const Transcript& transcript, TranscriptFormat format,
                              const TranscriptRendering& rendering) {
  switch (format) {
    case TranscriptFormat::json: return transcript_json(transcript);
    case TranscriptFormat::text: return transcript_text(transcript);
    case TranscriptFormat::srt: return transcript_srt(transcript);
    case TranscriptFormat::vtt: return transcript_vtt(transcript);
    case TranscriptFormat::verbose_json: return transcript_verbose_json(transcript, rendering);
  }
  return transcript_json(transcript);
}

std::string transcript_json(const Transcript& transcript) {
  return dump(ojson{{"text", transcript.text}, {"usage", usage_json(transcript.duration)}});
}

std::string transcript_verbose_json(const Transcript& transcript, const TranscriptRendering& rendering) {
  ojson segments = ojson::array();
  for (const Segment& s : transcript.segments) {
    const auto [start, end] = cue_times(s);
    segments.push_back(ojson{{"id", s.id},
                             // NOTE: whisper's seek counts mel frames (10 ms, hop 160 at 16 kHz).
                             {"seek", s.seek / 160},
                             {"start", json_seconds(start)},
                             {"end", json_seconds(end)},
                             {"text", s.text},
                             {"tokens", s.tokens},
                             {"temperature", json_float(s.temperature)},
                             {"avg_logprob", json_float(s.avg_logprob)},
                             {"compression_ratio", json_float(s.compression_ratio)},
                             {"no_speech_prob", json_float(s.no_speech_prob)}});
  }
  const pipelines::transcribe::TranscriptStats& st = transcript.stats;
  const bool translate = rendering.task == frontends::SpeechTask::translate;
  return dump(ojson{{"task", translate ? "translate" : "transcribe"},
                    {"language", translate ? std::string("english") : rendering.language_name},
                    {"duration", json_seconds(transcript.duration)},
                    {"text", transcript.text},
                    {"segments", std::move(segments)},
                    {"usage", usage_json(transcript.duration)},
                    {"prism",
                     {{"chunks", st.chunks},
                      {"rerun_chunks", st.rerun_chunks},
                      {"silent_chunks", st.silent_chunks},
                      {"speech_seconds", json_seconds(st.speech_seconds)},
                      {"decoded_tokens", st.decoded_tokens}}}});
}

std::string transcript_text(const Transcript& transcript) { return transcript.text + "\n"; }

std::string transcript_srt(const Transcript& transcript) {
  std::string out;
  int index = 0;
  for (const Segment& s : transcript.segments) {
    const std::string text = cue_text(s.text);
    if (text.empty()) continue;
    const auto [start, end] = cue_times(s);
    out += std::to_string(++index) + "\n" + format_cue_timestamp(start, ',') + " --> " +
           format_cue_timestamp(end, ',') + "\n" + text + "\n\n";
  }
  return out;
}

std::string transcript_vtt(const Transcript& transcript) {
  std::string out = "WEBVTT\n\n";
  for (const Segment& s : transcript.segments) {
    const std::string text = cue_text(s.text);
    if (text.empty()) continue;
    const auto [start, end] = cue_times(s);
    out += format_cue_timestamp(start, '.') + " --> " + format_cue_timestamp(end, '.') + "\n" + vtt_escape(text) +
           "\n\n";
  }
  return out;
}

std::string format_cue_timestamp(double seconds, char decimal_marker) {
  // NOTE: nearbyint rounds half to even in the default mode, as Python's round() does.
  const double ms = std::isfinite(seconds) && seconds > 0 ? std::nearbyint(seconds * 1000.0) : 0.0;
  const auto total = static_cast<int64_t>(ms);
  const int64_t hours = total / 3'600'000;
  const int64_t minutes = total / 60'000 % 60;
  const int64_t secs = total / 1000 % 60;
  const int64_t millis = total % 1000;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld%c%03lld", static_cast<long long>(hours),
                static_cast<long long>(minutes), static_cast<long long>(secs), decimal_marker,
                static_cast<long long>(millis));
  return buf;
}

int64_t billed_seconds(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) return 0;
  // NOTE: 1e-6 absorbs the error of samples / rate (11.0 s of audio is 11, not 12).
  return static_cast<int64_t>(std::ceil(seconds - 1e-6));
}

std::string language_name(std::string_view code) { return frontends::SpeechProcessor::language_name(code); }

std::string transcript_delta_event(std::string_view delta) {
  return dump(ojson{{"type", "transcript.text.delta"}, {"delta", delta}});
}

std::string transcript_done_event(const Transcript& transcript) {
  return dump(ojson{{"type", "transcript.text.done"},
                    {"text", transcript.text},
                    {"usage", usage_json(transcript.duration)}});
}

}  // namespace prism::api

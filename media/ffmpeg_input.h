// media/ffmpeg_input.h: what decode_video (media/video_decode.cpp) and decode_with_ffmpeg
// (media/audio_ffmpeg.cpp) share to open FFmpeg's demuxers over the caller's bytes: an
// AVIOContext reading from memory, the format context opened on it under a list of allowed
// demuxers, and FFmpeg's log routed to Prism's debug log. Internal to media/.
// NOTE: nothing opened here reads outside the caller's bytes. Some demuxers open further
// inputs a file names (HLS and concat playlists, a mov's references to other files, DASH
// manifests): each such nested open goes through AVFormatContext::io_open, which here always
// refuses (EPERM), so an upload cannot make the server read a local file or fetch a URL; the
// caller's list of demuxers (also the format whitelist) keeps every other demuxer out.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

struct AVFormatContext;
struct AVIOContext;

namespace prism::media::detail {

// FFmpeg prints to stderr by default (every corrupt upload would reach the server's log as
// noise); its messages go to the debug log instead. Process-wide, set once; call before any
// FFmpeg work.
void route_ffmpeg_log();

// av_strerror's text for an AVERROR code.
std::string av_error_text(int error);

// The caller's bytes and the reader's position in them, AVIOContext's opaque.
struct MemoryInput {
  const uint8_t* data = nullptr;  // not owned
  int64_t size = 0;
  int64_t pos = 0;
};

// A demuxer over the caller's bytes (which must outlive it). Owns the format and I/O
// contexts; heap-allocated because io reads through &input.
struct MemoryDemuxer {
  MemoryDemuxer() = default;
  MemoryDemuxer(const MemoryDemuxer&) = delete;
  MemoryDemuxer& operator=(const MemoryDemuxer&) = delete;
  ~MemoryDemuxer();

  AVFormatContext* fmt = nullptr;
  AVIOContext* io = nullptr;
  MemoryInput input;
};

// What a caller admits and how its refusals read ("is not a video ...", "is not audio ...").
struct DemuxerSpec {
  // Demuxer names in FFmpeg's list syntax ("mov,mp4,matroska"): the probed format must be on
  // it, and it is the format context's whitelist.
  const char* demuxers = nullptr;
  // A probe scoring below this counts as no format found.
  int min_probe_score = 0;
  // Names the reader in out-of-memory messages ("out of memory for the video reader").
  std::string_view reader_name;
  // The message when the probe finds no format.
  std::string_view unknown_format_message;
  // A format off the list: this + its long name + ")".
  std::string_view other_format_prefix;
};

// Probes the bytes and opens the format context (the header read, no stream info yet).
// Errors: the spec's messages, "is corrupt: its <format> container cannot be read (...)",
// resource_exhausted when out of memory.
Result<std::unique_ptr<MemoryDemuxer>> open_memory_demuxer(std::span<const uint8_t> bytes, const DemuxerSpec& spec);

}  // namespace prism::media::detail

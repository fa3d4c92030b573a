// media/ffmpeg_input.cpp: FFmpeg's demuxers over the caller's bytes (media/ffmpeg_input.h).
// Reads nothing but the span: no file, no URL, no nested input.
#include "media/ffmpeg_input.h"

#include <algorithm>
#include <cstring>
#include <mutex>

extern "C" {
#include <libavformat/avformat.h>
#include <libavutil/avstring.h>
}

#include "base/log.h"

namespace prism::media::detail {
namespace {

constexpr unsigned kProbeBytes = 5'000'000;          // FFmpeg's default probesize
constexpr int64_t kAnalyzeMicroseconds = 5'000'000;  // FFmpeg's default max_analyze_duration
constexpr int kIoBufferBytes = 64 << 10;

int read_memory(void* opaque, uint8_t* buffer, int buffer_size) {
  auto* in = static_cast<MemoryInput*>(opaque);
  const int64_t n = std::min<int64_t>(buffer_size, in->size - in->pos);
  if (n <= 0) return AVERROR_EOF;
  std::memcpy(buffer, in->data + in->pos, static_cast<size_t>(n));
  in->pos += n;
  return static_cast<int>(n);
}

int64_t seek_memory(void* opaque, int64_t offset, int whence) {
  auto* in = static_cast<MemoryInput*>(opaque);
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return in->size;
  int64_t base = 0;
  if (whence == SEEK_CUR) {
    base = in->pos;
  } else if (whence == SEEK_END) {
    base = in->size;
  } else if (whence != SEEK_SET) {
    return AVERROR(EINVAL);
  }
  int64_t target = 0;
  if (__builtin_add_overflow(base, offset, &target) || target < 0 || target > in->size) return AVERROR(EINVAL);
  in->pos = target;
  return target;
}

// AVFormatContext::io_open for every input a file names (see the header's NOTE).
int refuse_nested_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) { return AVERROR(EPERM); }

std::string format_long_name(const AVInputFormat* format) {
  return format->long_name ? format->long_name : format->name;
}

}  // namespace

void route_ffmpeg_log() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_callback([](void* avcl, int level, const char* format, va_list args) {
      if (level > av_log_get_level()) return;
      char line[1024];
      int print_prefix = 1;
      av_log_format_line2(avcl, level, format, args, line, sizeof line, &print_prefix);
      std::string_view text(line);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
      if (!text.empty()) PRISM_LOG_DEBUG("ffmpeg: {}", text);
    });
  });
}

std::string av_error_text(int error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(error, text, sizeof text);
  return text;
}

MemoryDemuxer::~MemoryDemuxer() {
  avformat_close_input(&fmt);
  if (io) {
    av_freep(&io->buffer);  // NOTE: FFmpeg may have replaced the buffer it was given
    avio_context_free(&io);
  }
}

Result<std::unique_ptr<MemoryDemuxer>> open_memory_demuxer(std::span<const uint8_t> bytes, const DemuxerSpec& spec) {
  const std::string out_of_memory = "out of memory for the " + std::string(spec.reader_name);
  auto d = std::make_unique<MemoryDemuxer>();
  d->input = MemoryInput{bytes.data(), static_cast<int64_t>(bytes.size()), 0};
  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBufferBytes));
  if (!buffer) return resource_exhausted(out_of_memory);
  d->io = avio_alloc_context(buffer, kIoBufferBytes, 0, &d->input, read_memory, nullptr, seek_memory);
  if (!d->io) {
    av_free(buffer);
    return resource_exhausted(out_of_memory);
  }
  const AVInputFormat* format = nullptr;
  const int score = av_probe_input_buffer2(d->io, &format, "", nullptr, 0, kProbeBytes);
  if (score < spec.min_probe_score || !format) return invalid_argument(std::string(spec.unknown_format_message));
  if (av_match_list(format->name, spec.demuxers, ',') <= 0)
    return invalid_argument(std::string(spec.other_format_prefix) + format_long_name(format) + ")");
  d->fmt = avformat_alloc_context();
  if (!d->fmt) return resource_exhausted(out_of_memory);
  d->fmt->pb = d->io;
  d->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
  d->fmt->probesize = kProbeBytes;
  d->fmt->max_analyze_duration = kAnalyzeMicroseconds;
  d->fmt->io_open = refuse_nested_open;
  d->fmt->format_whitelist = av_strdup(spec.demuxers);
  const int error = avformat_open_input(&d->fmt, nullptr, format, nullptr);  // frees fmt on failure
  if (error < 0) {
    return invalid_argument("is corrupt: its " + format_long_name(format) + " container cannot be read (" +
                            av_error_text(error) + ")");
  }
  return d;
}

}  // namespace prism::media::detail

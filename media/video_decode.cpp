// media/video_decode.cpp: decode_video (media/video.h) with libavformat, libavcodec and
// libswscale, from memory. Samples frames by time, converts them to RGB and scales them down.
// NOTE: nothing here reads outside the caller's bytes: the demuxer reads through an
// AVIOContext over the span, every nested open (playlists, references to other files) is
// refused, and only the common video containers are demuxed (media/ffmpeg_input.h, shared
// with media/audio_ffmpeg.cpp). Never throws; bad input is an invalid_argument predicate,
// never a crash. One decoder thread: Prism has one compute pool.
#include "media/video.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "media/ffmpeg_input.h"

namespace prism::media {
namespace {

using detail::av_error_text;
using detail::DemuxerSpec;
using detail::MemoryDemuxer;
using detail::open_memory_demuxer;
using detail::route_ffmpeg_log;

// Demuxer names (FFmpeg's list syntax) of the containers video is read from: mp4/mov/3gp,
// mkv/webm, avi, flv, MPEG-TS/PS, ogg, asf/wmv, animated GIF, ivf, nut. Still-image
// demuxers (image2pipe & co.) are left to decode_image; audio-only formats are refused.
constexpr const char* kVideoDemuxers = "mov,mp4,matroska,webm,avi,flv,mpegts,mpeg,ogg,asf,gif,ivf,nut";
// More frames than any model's context holds; a bound on the sampler's own work and memory.
constexpr int kMaxSampledFrames = 10'000;

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

std::string limit_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// What decode_video admits (media/ffmpeg_input.h) and how its refusals read.
constexpr DemuxerSpec kVideoSpec{
    .demuxers = kVideoDemuxers,
    .min_probe_score = 0,  // any format the probe finds
    .reader_name = "video reader",
    .unknown_format_message = "is not a video FFmpeg can read",
    .other_format_prefix = "is not a video (FFmpeg reads it as ",
};

Result<std::unique_ptr<MemoryDemuxer>> open_demuxer(std::span<const uint8_t> bytes) {
  return open_memory_demuxer(bytes, kVideoSpec);
}

// The video stream to decode (FFmpeg's best; never cover art), or -1.
int find_video_stream(AVFormatContext* fmt) {
  const int best = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (best >= 0 && !(fmt->streams[best]->disposition & AV_DISPOSITION_ATTACHED_PIC)) return best;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVStream* st = fmt->streams[i];
    if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && !(st->disposition & AV_DISPOSITION_ATTACHED_PIC))
      return static_cast<int>(i);
  }
  return -1;
}

// The decoders' own pixel cap (libavcodec's max_pixels): a backstop against a stream whose
// header hides its size. It counts padding (alignment, edges), so it is set with headroom;
// check_frame_pixels applies the exact limit to what comes out.
int64_t decoder_max_pixels(const VideoLimits& limits) {
  return std::clamp<int64_t>(2 * limits.max_frame_pixels + (1 << 16), 1, std::numeric_limits<int>::max());
}

Status check_frame_pixels(int width, int height, const VideoLimits& limits) {
  if (int64_t(width) * height > limits.max_frame_pixels) {
    return invalid_argument("has " + std::to_string(width) + "x" + std::to_string(height) +
                            " frames, more than the limit of " + std::to_string(limits.max_frame_pixels) + " pixels");
  }
  return Status();
}

// Fills the codec parameters (frame rate, sizes) by reading the first packets, with one
// decoder thread and the pixel limit, so that a bomb is refused while probing too.
Status find_stream_info(AVFormatContext* fmt, const VideoLimits& limits) {
  const unsigned num_streams = fmt->nb_streams;
  std::vector<AVDictionary*> options(num_streams, nullptr);
  for (AVDictionary*& o : options) {
    av_dict_set(&o, "threads", "1", 0);
    av_dict_set_int(&o, "max_pixels", decoder_max_pixels(limits), 0);
  }
  const int error = avformat_find_stream_info(fmt, num_streams ? options.data() : nullptr);
  for (AVDictionary*& o : options) av_dict_free(&o);
  if (error < 0) return invalid_argument("is corrupt: its streams cannot be read (" + av_error_text(error) + ")");
  return Status();
}

// ---- the timeline and which times to sample ----

struct Timeline {
  AVRational time_base{1, 1};
  int64_t start_ts = AV_NOPTS_VALUE;  // stream time base; unknown until the first frame when NOPTS
  double duration = 0;                // seconds; 0 when unknown
  double fps = 0;                     // average frames per second; 0 when unknown
  int64_t num_frames = 0;             // 0 when unknown
  // Frame times within this of a target count as at it: timestamps in a container are
  // rounded (webm: to the millisecond), which must never skip the frame meant.
  double tolerance() const { return fps > 0 ? 0.5 / fps : 1e-3; }
};

bool valid(AVRational r) { return r.num > 0 && r.den > 0; }

Timeline read_timeline(const AVFormatContext* fmt, const AVStream* st) {
  Timeline t;
  t.time_base = st->time_base;
  t.start_ts = st->start_time;
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0) {
    t.duration = double(st->duration) * av_q2d(st->time_base);
  } else if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0 &&
             fmt->duration_estimation_method != AVFMT_DURATION_FROM_BITRATE) {
    t.duration = double(fmt->duration) / AV_TIME_BASE;  // a guess from the bitrate is not trusted
  }
  // NOTE: the average rate is frames / stated duration, off when a muxer left the last frame
  // without a duration (40 frames "in 3.9 s": 10.26 fps); the base rate is the one every
  // timestamp is a multiple of. When the two are close the base rate is the true one; when
  // they are far apart (variable frame rate) the average is.
  const double avg = valid(st->avg_frame_rate) ? av_q2d(st->avg_frame_rate) : 0;
  const double base = valid(st->r_frame_rate) ? av_q2d(st->r_frame_rate) : 0;
  if (avg > 0 && base > 0) {
    t.fps = std::abs(base - avg) <= 0.05 * avg ? base : avg;
  } else {
    t.fps = avg > 0 ? avg : base;
  }
  if (st->nb_frames > 0) {
    t.num_frames = st->nb_frames;
  } else if (t.fps > 0 && t.duration > 0) {
    t.num_frames = std::llround(t.duration * t.fps);
  }
  return t;
}

// The duration of a container that does not state it, from the packets' timestamps (a
// second pass over the bytes that reads packets without decoding them). Stops past the
// limit.
Result<double> scan_duration(std::span<const uint8_t> bytes, int stream, const VideoLimits& limits) {
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryDemuxer> d, open_demuxer(bytes));
  if (stream >= int(d->fmt->nb_streams)) return invalid_argument("is corrupt: its streams change between reads");
  for (unsigned i = 0; i < d->fmt->nb_streams; ++i)
    if (int(i) != stream) d->fmt->streams[i]->discard = AVDISCARD_ALL;
  const AVStream* st = d->fmt->streams[stream];
  const double tb = av_q2d(st->time_base);
  int64_t first = AV_NOPTS_VALUE, end = AV_NOPTS_VALUE;
  AVPacket* packet = av_packet_alloc();
  if (!packet) return resource_exhausted("out of memory for the video reader");
  while (av_read_frame(d->fmt, packet) >= 0) {
    if (packet->stream_index == stream) {
      const int64_t ts = packet->pts != AV_NOPTS_VALUE ? packet->pts : packet->dts;
      if (ts != AV_NOPTS_VALUE) {
        if (first == AV_NOPTS_VALUE || ts < first) first = ts;
        const int64_t packet_end = ts + std::max<int64_t>(packet->duration, 0);
        if (end == AV_NOPTS_VALUE || packet_end > end) end = packet_end;
        if (double(end - first) * tb > limits.max_seconds) break;
      }
    }
    av_packet_unref(packet);
  }
  av_packet_free(&packet);
  if (first == AV_NOPTS_VALUE) return 0.0;
  return double(end - first) * tb;
}

// NOTE: HF's / vLLM's rule for a frame count: np.linspace(0, total - 1, n).astype(int) over
// frame indices, computed here with numpy's arithmetic (i * step, the last one exact); index k
// is the frame at k / fps (read_timeline's rate; with a variable frame rate that makes it a
// spread over time). A stream without any frame rate is spread over time directly:
// i * duration / n.
std::vector<double> spread_times(const Timeline& t, int n) {
  std::vector<double> times;
  if (t.fps > 0 && t.num_frames > 0) {
    n = int(std::min<int64_t>(n, t.num_frames));
    const double step = n > 1 ? double(t.num_frames - 1) / double(n - 1) : 0;
    for (int i = 0; i < n; ++i) {
      const int64_t index = i == n - 1 && n > 1 ? t.num_frames - 1 : static_cast<int64_t>(i * step);
      times.push_back(double(index) / t.fps);
    }
  } else if (t.duration > 0) {
    for (int i = 0; i < n; ++i) times.push_back(i * t.duration / n);
  } else {
    times.push_back(0);
  }
  return times;
}

// The times (seconds from the stream's start, increasing) whose frames are kept.
std::vector<double> sample_times(const Timeline& t, const VideoSampling& s) {
  if (s.num_frames > 0) return spread_times(t, std::min(s.num_frames, s.max_frames));
  if (t.duration <= 0) return {0.0};
  // k / fps for every k with k / fps < duration (a 4-s clip at 1 fps: 0, 1, 2, 3).
  const double count = std::ceil(t.duration * s.fps - 1e-6);
  if (count > s.max_frames) return spread_times(t, s.max_frames);
  std::vector<double> times;
  for (int k = 0; k < int(count); ++k) times.push_back(k / s.fps);
  if (times.empty()) times.push_back(0);
  return times;
}

// ---- decoding ----

struct FreeCodecContext {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FreeFrame {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct FreePacket {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FreeSws {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

// The full-range pixel formats FFmpeg deprecates, as their plain formats (swscale warns
// about them and wants the range said separately).
AVPixelFormat plain_format(AVPixelFormat format, bool* full_range) {
  switch (format) {
    case AV_PIX_FMT_YUVJ420P: *full_range = true; return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: *full_range = true; return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: *full_range = true; return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: *full_range = true; return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P: *full_range = true; return AV_PIX_FMT_YUV411P;
    default: return format;
  }
}

// Decodes the stream in order and keeps, for each target time, the first frame at or after
// it (within Timeline::tolerance). Seeks forward over a keyframe when the next target lies
// beyond it, so a long video is not decoded whole for a few frames.
class FrameSampler {
 public:
  FrameSampler(MemoryDemuxer& demuxer, int stream, const Timeline& timeline, std::vector<double> targets,
               const VideoSampling& sampling, const VideoLimits& limits)
      : fmt_(demuxer.fmt),
        st_(demuxer.fmt->streams[stream]),
        stream_(stream),
        timeline_(timeline),
        targets_(std::move(targets)),
        sampling_(sampling),
        limits_(limits) {}

  Status run(VideoFrames& out);

 private:
  Status open_decoder();
  Status drain(VideoFrames& out);
  Status on_frame(AVFrame* frame, VideoFrames& out);
  Status keep(const AVFrame* frame, double t, VideoFrames& out);
  void maybe_seek();
  bool done() const { return next_ >= targets_.size(); }
  double seconds(int64_t ts) const { return double(ts - timeline_.start_ts) * av_q2d(timeline_.time_base); }
  int64_t stream_ts(double seconds) const {
    return timeline_.start_ts + int64_t(std::floor(seconds / av_q2d(timeline_.time_base)));
  }

  AVFormatContext* fmt_;  // not owned
  AVStream* st_;          // not owned
  int stream_;
  Timeline timeline_;
  std::vector<double> targets_;
  VideoSampling sampling_;
  VideoLimits limits_;

  std::unique_ptr<AVCodecContext, FreeCodecContext> codec_;
  std::unique_ptr<AVFrame, FreeFrame> frame_, last_;
  std::unique_ptr<SwsContext, FreeSws> sws_;
  size_t next_ = 0;                        // the first target not yet met
  size_t seeked_for_ = size_t(-1);         // the target a seek was last tried for
  double last_t_ = -1, last_kept_t_ = -1;  // seconds of the last decoded / kept frame
  int64_t last_ts_ = AV_NOPTS_VALUE;       // stream timestamp of the last decoded frame
  int64_t num_decoded_ = 0;
  std::string last_error_;
};

Status FrameSampler::open_decoder() {
  const AVCodec* decoder = avcodec_find_decoder(st_->codecpar->codec_id);
  if (!decoder) {
    return invalid_argument("has video in " + std::string(avcodec_get_name(st_->codecpar->codec_id)) +
                            ", which FFmpeg cannot decode here");
  }
  codec_.reset(avcodec_alloc_context3(decoder));
  frame_.reset(av_frame_alloc());
  last_.reset(av_frame_alloc());
  if (!codec_ || !frame_ || !last_) return resource_exhausted("out of memory for the video decoder");
  if (avcodec_parameters_to_context(codec_.get(), st_->codecpar) < 0)
    return invalid_argument("is corrupt: its video stream's parameters are invalid");
  codec_->pkt_timebase = st_->time_base;
  codec_->thread_count = 1;
  codec_->max_pixels = decoder_max_pixels(limits_);
  const int error = avcodec_open2(codec_.get(), decoder, nullptr);
  if (error < 0) return invalid_argument("is corrupt: its video decoder cannot start (" + av_error_text(error) + ")");
  return Status();
}

Status FrameSampler::run(VideoFrames& out) {
  PRISM_RETURN_IF_ERROR(open_decoder());
  std::unique_ptr<AVPacket, FreePacket> packet(av_packet_alloc());
  if (!packet) return resource_exhausted("out of memory for the video reader");
  while (!done()) {
    const int read = av_read_frame(fmt_, packet.get());
    if (read < 0) {
      if (read != AVERROR_EOF) last_error_ = av_error_text(read);  // truncated: keep what decoded
      break;
    }
    // A packet the demuxer knows is damaged (cut short by a truncated file) would decode to
    // a concealed grey frame: it is skipped.
    if (packet->stream_index == stream_ && !(packet->flags & AV_PKT_FLAG_CORRUPT)) {
      const int sent = avcodec_send_packet(codec_.get(), packet.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) last_error_ = av_error_text(sent);  // a broken packet: skip it
    }
    av_packet_unref(packet.get());
    PRISM_RETURN_IF_ERROR(drain(out));
    maybe_seek();
  }
  if (!done()) {
    avcodec_send_packet(codec_.get(), nullptr);  // flush the frames the decoder holds back
    PRISM_RETURN_IF_ERROR(drain(out));
  }
  // A target past the last frame (the stated duration was long) gets the last frame.
  if (!done() && num_decoded_ > 0 && last_t_ > last_kept_t_) PRISM_RETURN_IF_ERROR(keep(last_.get(), last_t_, out));
  if (out.frames.empty()) {
    return invalid_argument("is corrupt: no frame could be decoded" +
                            (last_error_.empty() ? std::string() : " (" + last_error_ + ")"));
  }
  return Status();
}

Status FrameSampler::drain(VideoFrames& out) {
  while (true) {
    const int received = avcodec_receive_frame(codec_.get(), frame_.get());
    if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return Status();
    if (received < 0) {
      last_error_ = av_error_text(received);
      return Status();
    }
    if ((frame_->flags & AV_FRAME_FLAG_CORRUPT) || frame_->decode_error_flags) {
      last_error_ = "a frame is damaged";
      av_frame_unref(frame_.get());
      continue;
    }
    const Status status = on_frame(frame_.get(), out);
    av_frame_unref(frame_.get());
    PRISM_RETURN_IF_ERROR(status);
  }
}

Status FrameSampler::on_frame(AVFrame* frame, VideoFrames& out) {
  PRISM_RETURN_IF_ERROR(check_frame_pixels(frame->width, frame->height, limits_));
  if (out.width <= 0 || out.height <= 0) {  // the container did not say
    out.width = frame->width;
    out.height = frame->height;
  }
  int64_t ts = frame->best_effort_timestamp;
  if (ts == AV_NOPTS_VALUE) {  // a frame without a time: one frame period after the last
    const double period = timeline_.fps > 0 ? 1 / (timeline_.fps * av_q2d(timeline_.time_base)) : 1;
    ts = last_ts_ == AV_NOPTS_VALUE ? 0 : last_ts_ + std::max<int64_t>(1, std::llround(period));
  }
  if (timeline_.start_ts == AV_NOPTS_VALUE) timeline_.start_ts = ts;
  const double t = seconds(ts);
  if (t > limits_.max_seconds + timeline_.tolerance()) {
    return invalid_argument("is longer than the limit of " + limit_text(limits_.max_seconds) + " s");
  }
  ++num_decoded_;
  last_ts_ = ts;
  last_t_ = t;
  av_frame_unref(last_.get());
  if (av_frame_ref(last_.get(), frame) < 0) return resource_exhausted("out of memory for video frames");
  if (done() || t <= last_kept_t_ || t < targets_[next_] - timeline_.tolerance()) return Status();
  return keep(frame, t, out);
}

Status FrameSampler::keep(const AVFrame* frame, double t, VideoFrames& out) {
  int width = frame->width, height = frame->height;
  const int longest = std::max(width, height);
  if (sampling_.max_side > 0 && longest > sampling_.max_side) {
    const double scale = double(sampling_.max_side) / longest;
    width = std::max(1, int(std::lround(frame->width * scale)));
    height = std::max(1, int(std::lround(frame->height * scale)));
  }
  bool full_range = frame->color_range == AVCOL_RANGE_JPEG;
  const AVPixelFormat format = plain_format(static_cast<AVPixelFormat>(frame->format), &full_range);
  sws_.reset(sws_getCachedContext(sws_.release(), frame->width, frame->height, format, width, height,
                                  AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr,
                                  nullptr, nullptr));
  if (!sws_) {
    const char* name = av_get_pix_fmt_name(format);
    return invalid_argument("has frames in pixel format " + std::string(name ? name : "unknown") +
                            ", which cannot be converted to RGB");
  }
  // YUV → RGB with the stream's matrix (BT.601 when unstated) and range. Ignored for RGB input.
  const int* coefficients = sws_getCoefficients(frame->colorspace);
  sws_setColorspaceDetails(sws_.get(), coefficients, full_range, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16,
                           1 << 16);
  Image image{width, height, std::vector<uint8_t>(size_t(width) * height * 3)};
  uint8_t* dst[4] = {image.pixels.data(), nullptr, nullptr, nullptr};
  const int dst_stride[4] = {width * 3, 0, 0, 0};
  if (sws_scale(sws_.get(), frame->data, frame->linesize, 0, frame->height, dst, dst_stride) != height)
    return invalid_argument("is corrupt: a frame cannot be converted to RGB");
  out.frames.push_back(std::move(image));
  out.timestamps.push_back(t);
  last_kept_t_ = t;
  // NOTE: one frame meets every target up to it, so no frame is kept twice (sampling faster
  // than the video's own rate gives its frames once each).
  while (!done() && targets_[next_] - timeline_.tolerance() <= t) ++next_;
  return Status();
}

void FrameSampler::maybe_seek() {
  if (done() || num_decoded_ == 0 || seeked_for_ == next_) return;
  seeked_for_ = next_;
  // Aim a few frames early: the index holds decode times, a B-frame stream shows its
  // keyframe a little later than it decodes it.
  const double margin = timeline_.tolerance() + (timeline_.fps > 0 ? 4 / timeline_.fps : 0.2);
  const int64_t target_ts = stream_ts(targets_[next_] - margin);
  const int entry = av_index_search_timestamp(st_, target_ts, AVSEEK_FLAG_BACKWARD);
  if (entry < 0) return;
  const AVIndexEntry* key = avformat_index_get_entry(st_, entry);
  // Only a keyframe past what is already decoded saves work.
  if (!key || !(key->flags & AVINDEX_KEYFRAME) || key->timestamp <= last_ts_) return;
  if (av_seek_frame(fmt_, stream_, key->timestamp, AVSEEK_FLAG_BACKWARD) < 0) return;
  avcodec_flush_buffers(codec_.get());
}

}  // namespace

Result<VideoFrames> decode_video(std::span<const uint8_t> bytes, const VideoSampling& sampling,
                                 const VideoLimits& limits) {
  if (sampling.num_frames <= 0 && !(sampling.fps > 0))
    return invalid_argument("video sampling needs fps > 0 or num_frames > 0");
  if (sampling.max_frames <= 0 || sampling.max_frames > kMaxSampledFrames) {
    return invalid_argument("video sampling needs max_frames in 1.." + std::to_string(kMaxSampledFrames));
  }
  if (bytes.empty()) return invalid_argument("is empty, not a video");
  if (int64_t(bytes.size()) > limits.max_bytes) {
    return invalid_argument("is " + std::to_string(bytes.size()) + " bytes, more than the limit of " +
                            std::to_string(limits.max_bytes) + " bytes");
  }
  route_ffmpeg_log();
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryDemuxer> demuxer, open_demuxer(bytes));
  AVFormatContext* fmt = demuxer->fmt;
  int stream = find_video_stream(fmt);
  if (stream < 0) return invalid_argument("has no video stream");
  // The container's stated size, before anything is decoded (stream info decodes a little).
  const AVCodecParameters* stated = fmt->streams[stream]->codecpar;
  PRISM_RETURN_IF_ERROR(check_frame_pixels(stated->width, stated->height, limits));
  PRISM_RETURN_IF_ERROR(find_stream_info(fmt, limits));
  stream = find_video_stream(fmt);
  if (stream < 0) return invalid_argument("has no video stream");
  const AVStream* st = fmt->streams[stream];
  PRISM_RETURN_IF_ERROR(check_frame_pixels(st->codecpar->width, st->codecpar->height, limits));
  for (unsigned i = 0; i < fmt->nb_streams; ++i)
    if (int(i) != stream) fmt->streams[i]->discard = AVDISCARD_ALL;

  Timeline timeline = read_timeline(fmt, st);
  if (timeline.duration <= 0) {
    PRISM_ASSIGN_OR_RETURN(timeline.duration, scan_duration(bytes, stream, limits));
    if (timeline.num_frames == 0 && timeline.fps > 0)
      timeline.num_frames = std::llround(timeline.duration * timeline.fps);
  }
  if (timeline.duration > limits.max_seconds) {
    return invalid_argument("is " + seconds_text(timeline.duration) + " s long, more than the limit of " +
                            limit_text(limits.max_seconds) + " s");
  }
  VideoFrames out;
  out.duration = timeline.duration;
  out.native_fps = timeline.fps;
  out.width = st->codecpar->width;
  out.height = st->codecpar->height;
  FrameSampler sampler(*demuxer, stream, timeline, sample_times(timeline, sampling), sampling, limits);
  PRISM_RETURN_IF_ERROR(sampler.run(out));
  return out;
}

}  // namespace prism::media

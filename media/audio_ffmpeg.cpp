// media/audio_ffmpeg.cpp: decode_with_ffmpeg (media/audio_decoders.h): MP3, M4A/AAC,
// WebM/Opus and the other audio (and video) containers FFmpeg demuxes, from memory, through
// libavformat, libavcodec and libswresample (any sample format → interleaved float).
// NOTE: nothing here reads outside the caller's bytes: the demuxer reads through an
// AVIOContext over the span, every nested open (playlists, references to other files) is
// refused, and only the containers on kAudioDemuxers are demuxed (media/ffmpeg_input.h,
// shared with media/video_decode.cpp). One decoder thread: Prism has one compute pool.
// NOTE: damage. A damaged packet is skipped, as FFmpeg's own tools do (an MP3 frame is
// 26 ms); the file "is corrupt" when nothing decodes or more than kMaxFailedShare of its
// packets fail. A decoder ends at missing data without an error, and FFmpeg's Ogg demuxer
// ends the stream at a damaged page: when the header states a length, audio that ends short
// of it "is corrupt" (cut short or damaged), never passed on as a shorter recording. Without
// a stated length (a WebM or MP3 stream) the audio that decodes is all there is to know.
// Samples are concatenated in decode order: a gap in the timestamps is not filled.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libswresample/swresample.h>
}

#include "media/audio_decoders.h"
#include "media/audio_resample.h"
#include "media/ffmpeg_input.h"

namespace prism::media {
namespace {

using detail::av_error_text;
using detail::DemuxerSpec;
using detail::MemoryDemuxer;
using detail::open_memory_demuxer;
using detail::route_ffmpeg_log;

// Demuxer names (FFmpeg's list syntax) of the containers audio is read from: audio formats
// and the video containers people upload speech in (OpenAI's list: mp3, mp4, mpeg, mpga,
// m4a, wav, webm; plus ogg, flac and the rest). Playlists (hls, concat) are not on it.
constexpr const char* kAudioDemuxers =
    "mp3,aac,mov,mp4,m4a,3gp,matroska,webm,ogg,wav,w64,flac,aiff,caf,asf,amr,ac3,eac3,dts,au,avi,flv,mpegts,mpeg,"
    "wv,ape,tta,mpc,mpc8,nut";
// A probe below this is a guess (random bytes can hold a few MP3 frame headers by chance):
// FFmpeg's own threshold for reading more before deciding.
constexpr int kMinProbeScore = AVPROBE_SCORE_RETRY;
constexpr int64_t kMaxVideoPixels = 8192 * 8192;
constexpr double kMaxFailedShare = 0.1;

// What decode_with_ffmpeg admits (media/ffmpeg_input.h) and how its refusals read.
constexpr DemuxerSpec kAudioSpec{
    .demuxers = kAudioDemuxers,
    .min_probe_score = kMinProbeScore,
    .reader_name = "audio reader",
    .unknown_format_message = "is not audio that can be decoded (no known audio or video format)",
    .other_format_prefix = "is not audio that can be decoded (FFmpeg reads it as ",
};

Result<std::unique_ptr<MemoryDemuxer>> open_demuxer(std::span<const uint8_t> bytes) {
  return open_memory_demuxer(bytes, kAudioSpec);
}

// Fills the codec parameters by reading the first packets, with one decoder thread. A video
// stream beside the audio may be decoded a little too: its frames are capped (libavcodec's
// max_pixels) so that a bomb in it is refused rather than allocated.
Status find_stream_info(AVFormatContext* fmt) {
  const unsigned num_streams = fmt->nb_streams;
  std::vector<AVDictionary*> options(num_streams, nullptr);
  for (AVDictionary*& o : options) {
    av_dict_set(&o, "threads", "1", 0);
    av_dict_set_int(&o, "max_pixels", kMaxVideoPixels, 0);
  }
  const int error = avformat_find_stream_info(fmt, num_streams ? options.data() : nullptr);
  for (AVDictionary*& o : options) av_dict_free(&o);
  if (error < 0) return invalid_argument("is corrupt: its streams cannot be read (" + av_error_text(error) + ")");
  return Status();
}

// The stream's length in seconds as its header states it; 0 when it does not. A length
// FFmpeg guesses from the bit rate is not stated (a VBR file would be refused on a guess):
// such files are held to the limit while decoding.
double stated_seconds(const AVFormatContext* fmt, const AVStream* st) {
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0 && st->time_base.num > 0 && st->time_base.den > 0)
    return double(st->duration) * av_q2d(st->time_base);
  if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0 &&
      fmt->duration_estimation_method != AVFMT_DURATION_FROM_BITRATE)
    return double(fmt->duration) / AV_TIME_BASE;
  return 0;
}

// Audio::format: the first name of the demuxer's list ("mov,mp4,m4a,..." → "mp4"), and
// "webm" for a Matroska file whose EBML header says so.
std::string container_name(const AVInputFormat* format, std::span<const uint8_t> bytes) {
  const std::string names = format->name;
  if (names.starts_with("mov,")) return "mp4";
  if (names.starts_with("matroska")) {
    const std::string_view head(reinterpret_cast<const char*>(bytes.data()), std::min<size_t>(bytes.size(), 64));
    return head.find("webm") != std::string_view::npos ? "webm" : "matroska";
  }
  return names.substr(0, names.find(','));
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
struct FreeSwr {
  void operator()(SwrContext* s) const { swr_free(&s); }
};

// Decodes one audio stream in order, converting every frame to interleaved float and
// pushing it into the resampler.
class StreamDecoder {
 public:
  StreamDecoder(AVFormatContext* fmt, int stream, SpeechResampler& resampler)
      : fmt_(fmt), st_(fmt->streams[stream]), stream_(stream), resampler_(resampler) {}
  ~StreamDecoder() { av_channel_layout_uninit(&swr_layout_); }
  StreamDecoder(const StreamDecoder&) = delete;
  StreamDecoder& operator=(const StreamDecoder&) = delete;

  Status run();
  int source_rate() const { return source_rate_; }
  int source_channels() const { return source_channels_; }

 private:
  Status open_decoder();
  Status drain();
  Status push(const AVFrame* frame);
  Status configure_converter(const AVFrame* frame);

  AVFormatContext* fmt_;  // not owned
  AVStream* st_;          // not owned
  int stream_;
  SpeechResampler& resampler_;  // not owned
  std::unique_ptr<AVCodecContext, FreeCodecContext> codec_;
  std::unique_ptr<AVFrame, FreeFrame> frame_;
  std::unique_ptr<SwrContext, FreeSwr> swr_;
  // What swr_ converts from: a frame that differs (a chained stream) rebuilds it.
  int swr_format_ = -1, swr_rate_ = 0;
  AVChannelLayout swr_layout_{};
  std::vector<float> interleaved_;
  int source_rate_ = 0, source_channels_ = 0;  // of the first decoded frame
  int64_t num_packets_ = 0, num_failed_ = 0, num_frames_ = 0;
  std::string last_error_;
};

Status StreamDecoder::open_decoder() {
  const AVCodec* decoder = avcodec_find_decoder(st_->codecpar->codec_id);
  if (!decoder) {
    return invalid_argument("is not audio that can be decoded (its codec, " +
                            std::string(avcodec_get_name(st_->codecpar->codec_id)) + ", has no decoder here)");
  }
  codec_.reset(avcodec_alloc_context3(decoder));
  frame_.reset(av_frame_alloc());
  if (!codec_ || !frame_) return resource_exhausted("out of memory for the audio decoder");
  if (avcodec_parameters_to_context(codec_.get(), st_->codecpar) < 0)
    return invalid_argument("is corrupt: its audio stream's parameters are invalid");
  codec_->pkt_timebase = st_->time_base;
  codec_->thread_count = 1;
  const int error = avcodec_open2(codec_.get(), decoder, nullptr);
  if (error < 0) return invalid_argument("is corrupt: its audio decoder cannot start (" + av_error_text(error) + ")");
  return Status();
}

Status StreamDecoder::run() {
  PRISM_RETURN_IF_ERROR(open_decoder());
  std::unique_ptr<AVPacket, FreePacket> packet(av_packet_alloc());
  if (!packet) return resource_exhausted("out of memory for the audio reader");
  while (true) {
    const int read = av_read_frame(fmt_, packet.get());
    if (read < 0) {
      // A read error ends the stream as its end does (a file cut short); decode_with_ffmpeg
      // compares the audio with the length stated.
      if (read != AVERROR_EOF) last_error_ = av_error_text(read);
      break;
    }
    if (packet->stream_index == stream_) {
      ++num_packets_;
      if (packet->flags & AV_PKT_FLAG_CORRUPT) {  // the demuxer knows it is cut short
        ++num_failed_;
      } else if (const int sent = avcodec_send_packet(codec_.get(), packet.get());
                 sent < 0 && sent != AVERROR(EAGAIN)) {
        ++num_failed_;
        last_error_ = av_error_text(sent);
      }
    }
    av_packet_unref(packet.get());
    PRISM_RETURN_IF_ERROR(drain());
  }
  avcodec_send_packet(codec_.get(), nullptr);  // flush the frames the decoder holds back
  PRISM_RETURN_IF_ERROR(drain());
  const std::string detail = last_error_.empty() ? std::string() : " (" + last_error_ + ")";
  // A stream without a packet holds no audio (decode_audio says "is empty"); one whose
  // packets all fail is corrupt.
  if (num_frames_ == 0 && num_packets_ > 0) return invalid_argument("is corrupt: no audio could be decoded" + detail);
  if (double(num_failed_) > kMaxFailedShare * double(num_packets_)) {
    return invalid_argument("is corrupt: " + std::to_string(num_failed_) + " of its " + std::to_string(num_packets_) +
                            " audio packets fail to decode" + detail);
  }
  return Status();
}

Status StreamDecoder::drain() {
  while (true) {
    const int received = avcodec_receive_frame(codec_.get(), frame_.get());
    if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return Status();
    if (received < 0) {
      ++num_failed_;
      last_error_ = av_error_text(received);
      return Status();
    }
    const Status status = push(frame_.get());
    av_frame_unref(frame_.get());
    PRISM_RETURN_IF_ERROR(status);
  }
}

Status StreamDecoder::configure_converter(const AVFrame* frame) {
  AVChannelLayout layout{};
  if (av_channel_layout_check(&frame->ch_layout) && frame->ch_layout.order != AV_CHANNEL_ORDER_UNSPEC) {
    if (av_channel_layout_copy(&layout, &frame->ch_layout) < 0) return resource_exhausted("out of memory");
  } else {
    av_channel_layout_default(&layout, frame->ch_layout.nb_channels);
  }
  if (swr_ && swr_format_ == frame->format && swr_rate_ == frame->sample_rate &&
      av_channel_layout_compare(&swr_layout_, &layout) == 0) {
    av_channel_layout_uninit(&layout);
    return Status();
  }
  av_channel_layout_uninit(&swr_layout_);
  swr_layout_ = layout;  // takes ownership
  swr_format_ = frame->format;
  swr_rate_ = frame->sample_rate;
  SwrContext* swr = nullptr;
  // Same layout and rate out as in: only the sample format changes (the mix-down and the
  // rate are the resampler's).
  int error = swr_alloc_set_opts2(&swr, &swr_layout_, AV_SAMPLE_FMT_FLT, frame->sample_rate, &swr_layout_,
                                  static_cast<AVSampleFormat>(frame->format), frame->sample_rate, 0, nullptr);
  swr_.reset(swr);
  if (error >= 0) error = swr_init(swr_.get());
  if (error < 0) {
    swr_.reset();
    return invalid_argument(
        "is not audio that can be decoded (its samples cannot be converted: " + av_error_text(error) + ")");
  }
  return Status();
}

Status StreamDecoder::push(const AVFrame* frame) {
  const int channels = frame->ch_layout.nb_channels;
  if (frame->nb_samples <= 0) return Status();
  if (channels <= 0 || frame->sample_rate <= 0) {
    ++num_failed_;
    last_error_ = "a frame without channels or rate";
    return Status();
  }
  PRISM_RETURN_IF_ERROR(configure_converter(frame));
  interleaved_.resize(size_t(frame->nb_samples) * size_t(channels));
  auto* out = reinterpret_cast<uint8_t*>(interleaved_.data());
  const int converted = swr_convert(swr_.get(), &out, frame->nb_samples,
                                    const_cast<const uint8_t**>(frame->extended_data), frame->nb_samples);
  if (converted < 0) {
    ++num_failed_;
    last_error_ = av_error_text(converted);
    return Status();
  }
  if (num_frames_++ == 0) {
    source_rate_ = frame->sample_rate;
    source_channels_ = channels;
  }
  return resampler_.push({interleaved_.data(), size_t(converted) * size_t(channels)}, frame->sample_rate, channels);
}

// The audio stream to decode (FFmpeg's best), or -1.
int find_audio_stream(AVFormatContext* fmt) { return av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0); }

}  // namespace

Result<double> ffmpeg_stated_seconds(std::span<const uint8_t> bytes) {
  route_ffmpeg_log();
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryDemuxer> demuxer, open_demuxer(bytes));
  AVFormatContext* fmt = demuxer->fmt;
  PRISM_RETURN_IF_ERROR(find_stream_info(fmt));
  const int stream = find_audio_stream(fmt);
  if (stream < 0) return invalid_argument("has no audio stream");
  return stated_seconds(fmt, fmt->streams[stream]);
}

Result<Audio> decode_with_ffmpeg(std::span<const uint8_t> bytes, const AudioLimits& limits) {
  route_ffmpeg_log();
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryDemuxer> demuxer, open_demuxer(bytes));
  AVFormatContext* fmt = demuxer->fmt;
  PRISM_RETURN_IF_ERROR(find_stream_info(fmt));
  const int stream = find_audio_stream(fmt);
  if (stream < 0) return invalid_argument("has no audio stream");
  for (unsigned i = 0; i < fmt->nb_streams; ++i)
    if (int(i) != stream) fmt->streams[i]->discard = AVDISCARD_ALL;
  const double stated = stated_seconds(fmt, fmt->streams[stream]);
  PRISM_RETURN_IF_ERROR(check_stated_seconds(stated, limits));

  SpeechResampler resampler(limits.max_seconds);
  StreamDecoder decoder(fmt, stream, resampler);
  PRISM_RETURN_IF_ERROR(decoder.run());
  PRISM_RETURN_IF_ERROR(check_complete(resampler.source_seconds(), stated));
  Audio audio;
  audio.format = container_name(fmt->iformat, bytes);
  audio.source_rate = decoder.source_rate();
  audio.source_channels = decoder.source_channels();
  PRISM_ASSIGN_OR_RETURN(audio.samples, resampler.finish());
  return audio;
}

}  // namespace prism::media

#include "test_util/video_writer.h"

#include <cmath>
#include <cstring>
#include <memory>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libavutil/samplefmt.h>
}

namespace prism::test {
namespace {

constexpr uint8_t kLevels[4] = {32, 96, 160, 224};
constexpr int kAudioRate = 16000;

std::string av_error_text(int error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(error, text, sizeof text);
  return text;
}

struct MemorySink {
  std::vector<uint8_t> data;
  int64_t pos = 0;
};

int write_memory(void* opaque, uint8_t* buffer, int size) {
  auto* sink = static_cast<MemorySink*>(opaque);
  if (sink->pos + size > int64_t(sink->data.size())) sink->data.resize(size_t(sink->pos + size));
  std::memcpy(sink->data.data() + sink->pos, buffer, size_t(size));
  sink->pos += size;
  return size;
}

int64_t seek_memory(void* opaque, int64_t offset, int whence) {
  auto* sink = static_cast<MemorySink*>(opaque);
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return int64_t(sink->data.size());
  const int64_t base = whence == SEEK_CUR ? sink->pos : whence == SEEK_END ? int64_t(sink->data.size()) : 0;
  if (base + offset < 0) return AVERROR(EINVAL);
  sink->pos = base + offset;
  return sink->pos;
}

struct FreeCodecContext {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FreeFrame {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct FreePacket {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};

// Sends `frame` (null: flush) and writes every packet that comes out.
Status encode(AVFormatContext* fmt, AVCodecContext* enc, AVStream* st, const AVFrame* frame, AVPacket* packet,
              bool packet_durations) {
  int error = avcodec_send_frame(enc, frame);
  if (error < 0) return internal_error("encoding failed: " + av_error_text(error));
  while ((error = avcodec_receive_packet(enc, packet)) >= 0) {
    if (enc->codec_type == AVMEDIA_TYPE_VIDEO) packet->duration = packet_durations ? 1 : 0;  // one frame
    av_packet_rescale_ts(packet, enc->time_base, st->time_base);
    packet->stream_index = st->index;
    error = av_interleaved_write_frame(fmt, packet);
    if (error < 0) return internal_error("muxing failed: " + av_error_text(error));
  }
  if (error == AVERROR(EAGAIN) || error == AVERROR_EOF) return Status();
  return internal_error("encoding failed: " + av_error_text(error));
}

void configure_video(const VideoSpec& spec, const AVCodec* codec, AVCodecContext* enc, AVDictionary** options) {
  enc->width = spec.width;
  enc->height = spec.height;
  enc->time_base = AVRational{1, spec.fps};
  enc->framerate = AVRational{spec.fps, 1};
  enc->pix_fmt = AV_PIX_FMT_YUV420P;
  enc->colorspace = AVCOL_SPC_SMPTE170M;  // BT.601, what frame_colour's conversion uses
  enc->color_range = AVCOL_RANGE_MPEG;
  enc->max_b_frames = spec.max_b_frames;
  if (spec.gop_size > 0) enc->gop_size = spec.gop_size;
  enc->thread_count = 1;
  const std::string name = codec->name;
  if (name == "mpeg4") {
    enc->flags |= AV_CODEC_FLAG_QSCALE;
    enc->global_quality = FF_QP2LAMBDA * 2;
  } else if (name == "libvpx") {
    enc->bit_rate = 4'000'000;
    enc->qmin = 0;
    enc->qmax = 8;
    av_dict_set(options, "deadline", "good", 0);
    av_dict_set(options, "cpu-used", "5", 0);
  } else if (name == "libvpx-vp9") {
    av_dict_set(options, "lossless", "1", 0);
    av_dict_set(options, "deadline", "realtime", 0);
    av_dict_set(options, "cpu-used", "8", 0);
  } else if (name == "libx264") {
    av_dict_set(options, "crf", "4", 0);
    av_dict_set(options, "preset", "veryfast", 0);
  }
}

void configure_audio(const AVCodec* codec, AVCodecContext* enc, AVDictionary**) {
  enc->sample_fmt = codec->sample_fmts ? codec->sample_fmts[0] : AV_SAMPLE_FMT_S16;
  enc->sample_rate = kAudioRate;
  av_channel_layout_default(&enc->ch_layout, 1);
  enc->time_base = AVRational{1, kAudioRate};
  enc->bit_rate = 64'000;
}

// YUV 4:2:0 (BT.601, limited range) of a solid colour.
void fill_solid(AVFrame* frame, const Rgb& rgb) {
  const double r = rgb[0], g = rgb[1], b = rgb[2];
  const auto y = uint8_t(std::lround(16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255));
  const auto u = uint8_t(std::lround(128 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255));
  const auto v = uint8_t(std::lround(128 + (112.0 * r - 93.786 * g - 18.214 * b) / 255));
  for (int row = 0; row < frame->height; ++row) std::memset(frame->data[0] + row * frame->linesize[0], y, frame->width);
  for (int row = 0; row < (frame->height + 1) / 2; ++row) {
    std::memset(frame->data[1] + row * frame->linesize[1], u, (frame->width + 1) / 2);
    std::memset(frame->data[2] + row * frame->linesize[2], v, (frame->width + 1) / 2);
  }
}

Status write_frames(const VideoSpec& spec, AVFormatContext* fmt, AVCodecContext* enc, AVStream* st) {
  std::unique_ptr<AVFrame, FreeFrame> frame(av_frame_alloc());
  std::unique_ptr<AVPacket, FreePacket> packet(av_packet_alloc());
  if (!frame || !packet) return internal_error("out of memory");
  int64_t num_frames = spec.num_frames, samples_per_frame = 0;
  if (spec.audio_only) {
    samples_per_frame = enc->frame_size > 0 ? enc->frame_size : kAudioRate / 10;
    const int64_t total = int64_t(spec.num_frames) * kAudioRate / spec.fps;
    num_frames = (total + samples_per_frame - 1) / samples_per_frame;
    frame->format = enc->sample_fmt;
    frame->nb_samples = int(samples_per_frame);
    av_channel_layout_copy(&frame->ch_layout, &enc->ch_layout);
    frame->sample_rate = enc->sample_rate;
  } else {
    frame->format = enc->pix_fmt;
    frame->width = enc->width;
    frame->height = enc->height;
  }
  if (av_frame_get_buffer(frame.get(), 0) < 0) return internal_error("out of memory");
  for (int64_t i = 0; i < num_frames; ++i) {
    if (av_frame_make_writable(frame.get()) < 0) return internal_error("out of memory");
    if (spec.audio_only) {
      av_samples_set_silence(frame->data, 0, frame->nb_samples, frame->ch_layout.nb_channels,
                             static_cast<AVSampleFormat>(frame->format));
      frame->pts = i * samples_per_frame;
    } else {
      fill_solid(frame.get(), frame_colour(i));
      frame->pts = i;
      frame->quality = enc->global_quality;
    }
    PRISM_RETURN_IF_ERROR(encode(fmt, enc, st, frame.get(), packet.get(), spec.packet_durations));
  }
  return encode(fmt, enc, st, nullptr, packet.get(), spec.packet_durations);
}

// Encodes the spec into `fmt`, whose pb is open.
Status write_streams(const VideoSpec& spec, AVFormatContext* fmt) {
  const AVCodec* codec = avcodec_find_encoder_by_name(spec.codec.c_str());
  if (!codec) return not_found("no encoder " + spec.codec);
  AVStream* st = avformat_new_stream(fmt, nullptr);
  std::unique_ptr<AVCodecContext, FreeCodecContext> enc(avcodec_alloc_context3(codec));
  if (!st || !enc) return internal_error("out of memory");
  AVDictionary* options = nullptr;
  if (spec.audio_only) {
    configure_audio(codec, enc.get(), &options);
  } else {
    configure_video(spec, codec, enc.get(), &options);
  }
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  int error = avcodec_open2(enc.get(), codec, &options);
  av_dict_free(&options);
  if (error < 0) return internal_error("cannot open encoder " + spec.codec + ": " + av_error_text(error));
  if (avcodec_parameters_from_context(st->codecpar, enc.get()) < 0) return internal_error("codec parameters");
  st->time_base = enc->time_base;
  AVDictionary* mux_options = nullptr;
  if (spec.faststart) av_dict_set(&mux_options, "movflags", "+faststart", 0);
  error = avformat_write_header(fmt, &mux_options);
  av_dict_free(&mux_options);
  if (error < 0) return internal_error("cannot write the " + spec.container + " header: " + av_error_text(error));
  PRISM_RETURN_IF_ERROR(write_frames(spec, fmt, enc.get(), st));
  error = av_write_trailer(fmt);
  if (error < 0) return internal_error("cannot write the trailer: " + av_error_text(error));
  return Status();
}

struct FreeOutput {
  void operator()(AVFormatContext* f) const { avformat_free_context(f); }
};

// `path`: the file's, which the mp4 muxer reopens to move its index first (faststart).
Result<std::unique_ptr<AVFormatContext, FreeOutput>> new_output(const VideoSpec& spec, const char* path = nullptr) {
  AVFormatContext* fmt = nullptr;
  const int error = avformat_alloc_output_context2(&fmt, nullptr, spec.container.c_str(), path);
  if (error < 0 || !fmt) return not_found("no muxer " + spec.container + ": " + av_error_text(error));
  return std::unique_ptr<AVFormatContext, FreeOutput>(fmt);
}

}  // namespace

Rgb frame_colour(int64_t index) {
  const int64_t i = index % 64;
  return Rgb{kLevels[i % 4], kLevels[(i / 4) % 4], kLevels[(i / 16) % 4]};
}

int frame_index_of(const Rgb& rgb, int* distance) {
  int best = 0, best_distance = 1 << 30;
  for (int i = 0; i < 64; ++i) {
    const Rgb c = frame_colour(i);
    int d = 0;
    for (int k = 0; k < 3; ++k) d = std::max(d, std::abs(int(c[k]) - int(rgb[k])));
    if (d < best_distance) best = i, best_distance = d;
  }
  if (distance) *distance = best_distance;
  return best;
}

Rgb mean_colour(const std::vector<uint8_t>& pixels) {
  double sum[3] = {0, 0, 0};
  const size_t n = pixels.size() / 3;
  for (size_t p = 0; p < n; ++p)
    for (int k = 0; k < 3; ++k) sum[k] += pixels[p * 3 + k];
  Rgb mean{};
  for (int k = 0; k < 3; ++k) mean[k] = uint8_t(n ? std::lround(sum[k] / double(n)) : 0);
  return mean;
}

bool has_encoder(const std::string& name) { return avcodec_find_encoder_by_name(name.c_str()) != nullptr; }

Result<std::vector<uint8_t>> write_video(const VideoSpec& spec) {
  if (spec.faststart) return invalid_argument("faststart needs a file: use write_video_file");
  PRISM_ASSIGN_OR_RETURN(auto fmt, new_output(spec));
  MemorySink sink;
  constexpr int kBufferBytes = 64 << 10;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferBytes));
  AVIOContext* io = avio_alloc_context(buffer, kBufferBytes, 1, &sink, nullptr, write_memory,
                                       spec.seekable ? seek_memory : nullptr);
  if (!io) {
    av_free(buffer);
    return internal_error("out of memory");
  }
  fmt->pb = io;
  fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
  Status status = write_streams(spec, fmt.get());
  avio_flush(io);
  av_freep(&io->buffer);
  avio_context_free(&io);
  fmt->pb = nullptr;
  if (!status.ok()) return status;
  return std::move(sink.data);
}

Status write_video_file(const VideoSpec& spec, const std::string& path) {
  PRISM_ASSIGN_OR_RETURN(auto fmt, new_output(spec, path.c_str()));
  const int error = avio_open(&fmt->pb, path.c_str(), AVIO_FLAG_WRITE);
  if (error < 0) return internal_error("cannot open " + path + ": " + av_error_text(error));
  const Status status = write_streams(spec, fmt.get());
  avio_closep(&fmt->pb);
  return status;
}

}  // namespace prism::test

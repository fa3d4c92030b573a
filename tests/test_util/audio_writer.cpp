#include "test_util/audio_writer.h"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numbers>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/audio_fifo.h>
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
}

namespace prism::test {
namespace {

std::string av_error_text(int error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(error, text, sizeof text);
  return text;
}

// ---- libsndfile: WAV, FLAC, Ogg ----

struct SndfileSink {
  std::vector<uint8_t> data;
  sf_count_t pos = 0;
};

sf_count_t sink_length(void* user) { return sf_count_t(static_cast<SndfileSink*>(user)->data.size()); }

sf_count_t sink_seek(sf_count_t offset, int whence, void* user) {
  auto* sink = static_cast<SndfileSink*>(user);
  const sf_count_t base = whence == SEEK_CUR ? sink->pos : whence == SEEK_END ? sf_count_t(sink->data.size()) : 0;
  if (base + offset < 0) return -1;
  sink->pos = base + offset;
  return sink->pos;
}

sf_count_t sink_read(void* destination, sf_count_t count, void* user) {
  auto* sink = static_cast<SndfileSink*>(user);
  const sf_count_t n = std::clamp<sf_count_t>(sf_count_t(sink->data.size()) - sink->pos, 0, count);
  if (n > 0) std::memcpy(destination, sink->data.data() + sink->pos, size_t(n));
  sink->pos += n;
  return n;
}

sf_count_t sink_write(const void* source, sf_count_t count, void* user) {
  auto* sink = static_cast<SndfileSink*>(user);
  if (sink->pos + count > sf_count_t(sink->data.size())) sink->data.resize(size_t(sink->pos + count));
  std::memcpy(sink->data.data() + sink->pos, source, size_t(count));
  sink->pos += count;
  return count;
}

sf_count_t sink_tell(void* user) { return static_cast<SndfileSink*>(user)->pos; }

int sndfile_format(AudioFormat format) {
  switch (format) {
    case AudioFormat::wav_pcm16: return SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    case AudioFormat::wav_pcm24: return SF_FORMAT_WAV | SF_FORMAT_PCM_24;
    case AudioFormat::wav_float: return SF_FORMAT_WAV | SF_FORMAT_FLOAT;
    case AudioFormat::flac: return SF_FORMAT_FLAC | SF_FORMAT_PCM_24;
    case AudioFormat::ogg_vorbis: return SF_FORMAT_OGG | SF_FORMAT_VORBIS;
    case AudioFormat::ogg_opus: return SF_FORMAT_OGG | SF_FORMAT_OPUS;
    default: return 0;
  }
}

Result<std::vector<uint8_t>> write_with_sndfile(std::span<const float> interleaved, const AudioSpec& spec) {
  SndfileSink sink;
  SF_VIRTUAL_IO io{sink_length, sink_seek, sink_read, sink_write, sink_tell};
  SF_INFO info{};
  info.samplerate = spec.rate;
  info.channels = spec.channels;
  info.format = sndfile_format(spec.format);
  SNDFILE* sf = sf_open_virtual(&io, SFM_WRITE, &info, &sink);
  if (!sf)
    return internal_error("libsndfile cannot write " + audio_format_name(spec.format) + ": " + sf_strerror(nullptr));
  sf_command(sf, SFC_SET_CLIPPING, nullptr, SF_TRUE);
  if (spec.format == AudioFormat::ogg_vorbis || spec.format == AudioFormat::ogg_opus) {
    double level = 0.1;  // 0: the highest quality
    sf_command(sf, SFC_SET_COMPRESSION_LEVEL, &level, sizeof level);
  }
  const sf_count_t num_frames = sf_count_t(interleaved.size()) / spec.channels;
  const sf_count_t written = sf_writef_float(sf, interleaved.data(), num_frames);
  const std::string error = sf_strerror(sf);
  const int closed = sf_close(sf);
  if (written != num_frames || closed != 0) return internal_error("libsndfile failed writing: " + error);
  return std::move(sink.data);
}

// ---- FFmpeg: MP3, M4A, WebM ----

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
struct FreeSwr {
  void operator()(SwrContext* s) const { swr_free(&s); }
};
struct FreeFifo {
  void operator()(AVAudioFifo* f) const { av_audio_fifo_free(f); }
};
struct FreeOutput {
  void operator()(AVFormatContext* f) const { avformat_free_context(f); }
};

struct Encoding {
  const char* codec;
  const char* muxer;
  int64_t bit_rate;
};

Encoding ffmpeg_encoding(AudioFormat format) {
  switch (format) {
    case AudioFormat::mp3: return {"libmp3lame", "mp3", 192'000};
    case AudioFormat::m4a: return {"aac", "ipod", 192'000};
    default: return {"libopus", "webm", 128'000};
  }
}

// The encoder's rate for `rate`: itself when supported, else the lowest supported rate above
// it (the highest when none is).
int encoder_rate(const AVCodec* codec, int rate) {
  if (!codec->supported_samplerates) return rate;
  int best = 0, highest = 0;
  for (const int* r = codec->supported_samplerates; *r; ++r) {
    if (*r == rate) return rate;
    highest = std::max(highest, *r);
    if (*r > rate && (best == 0 || *r < best)) best = *r;
  }
  return best ? best : highest;
}

// An FFmpeg encoder and muxer writing into a MemorySink.
class FfmpegWriter {
 public:
  ~FfmpegWriter() {
    if (io_) {
      av_freep(&io_->buffer);
      avio_context_free(&io_);
    }
    if (fmt_) fmt_->pb = nullptr;
  }

  Status open(const AudioSpec& spec);
  Status write(std::span<const float> interleaved);
  Status finish();
  std::vector<uint8_t> take() { return std::move(sink_.data); }

 private:
  Status encode(const AVFrame* frame);
  Status encode_from_fifo(bool last);

  AudioSpec spec_;
  MemorySink sink_;
  AVIOContext* io_ = nullptr;
  std::unique_ptr<AVFormatContext, FreeOutput> fmt_;
  std::unique_ptr<AVCodecContext, FreeCodecContext> enc_;
  std::unique_ptr<SwrContext, FreeSwr> swr_;
  std::unique_ptr<AVAudioFifo, FreeFifo> fifo_;
  std::unique_ptr<AVFrame, FreeFrame> frame_;
  std::unique_ptr<AVPacket, FreePacket> packet_;
  AVStream* st_ = nullptr;
  int frame_size_ = 1024;
  int64_t next_pts_ = 0;
};

Status FfmpegWriter::open(const AudioSpec& spec) {
  spec_ = spec;
  const Encoding encoding = ffmpeg_encoding(spec.format);
  AVFormatContext* fmt = nullptr;
  int error = avformat_alloc_output_context2(&fmt, nullptr, encoding.muxer, nullptr);
  if (error < 0 || !fmt) return not_found(std::string("no muxer ") + encoding.muxer);
  fmt_.reset(fmt);
  const AVCodec* codec = avcodec_find_encoder_by_name(encoding.codec);
  if (!codec) return not_found(std::string("no encoder ") + encoding.codec);
  enc_.reset(avcodec_alloc_context3(codec));
  frame_.reset(av_frame_alloc());
  packet_.reset(av_packet_alloc());
  st_ = avformat_new_stream(fmt_.get(), nullptr);
  if (!enc_ || !frame_ || !packet_ || !st_) return internal_error("out of memory");
  enc_->sample_fmt = codec->sample_fmts ? codec->sample_fmts[0] : AV_SAMPLE_FMT_FLTP;
  enc_->sample_rate = encoder_rate(codec, spec.rate);
  av_channel_layout_default(&enc_->ch_layout, spec.channels);
  enc_->bit_rate = encoding.bit_rate;
  enc_->time_base = AVRational{1, enc_->sample_rate};
  enc_->thread_count = 1;
  if (fmt_->oformat->flags & AVFMT_GLOBALHEADER) enc_->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  error = avcodec_open2(enc_.get(), codec, nullptr);
  if (error < 0)
    return internal_error(std::string("cannot open encoder ") + encoding.codec + ": " + av_error_text(error));
  if (enc_->frame_size > 0 && !(codec->capabilities & AV_CODEC_CAP_VARIABLE_FRAME_SIZE)) frame_size_ = enc_->frame_size;
  if (avcodec_parameters_from_context(st_->codecpar, enc_.get()) < 0) return internal_error("codec parameters");
  st_->time_base = enc_->time_base;

  SwrContext* swr = nullptr;
  AVChannelLayout layout{};
  av_channel_layout_default(&layout, spec.channels);
  error = swr_alloc_set_opts2(&swr, &layout, enc_->sample_fmt, enc_->sample_rate, &layout, AV_SAMPLE_FMT_FLT, spec.rate,
                              0, nullptr);
  swr_.reset(swr);
  if (error >= 0) error = swr_init(swr_.get());
  if (error < 0) return internal_error("swresample: " + av_error_text(error));
  fifo_.reset(av_audio_fifo_alloc(enc_->sample_fmt, spec.channels, frame_size_));
  if (!fifo_) return internal_error("out of memory");

  constexpr int kBufferBytes = 64 << 10;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferBytes));
  io_ =
      avio_alloc_context(buffer, kBufferBytes, 1, &sink_, nullptr, write_memory, spec.seekable ? seek_memory : nullptr);
  if (!io_) {
    av_free(buffer);
    return internal_error("out of memory");
  }
  fmt_->pb = io_;
  fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
  error = avformat_write_header(fmt_.get(), nullptr);
  if (error < 0)
    return internal_error(std::string("cannot write the ") + encoding.muxer + " header: " + av_error_text(error));
  return Status();
}

// Sends `frame` (null: flush) and writes every packet that comes out.
Status FfmpegWriter::encode(const AVFrame* frame) {
  int error = avcodec_send_frame(enc_.get(), frame);
  if (error < 0) return internal_error("encoding failed: " + av_error_text(error));
  while ((error = avcodec_receive_packet(enc_.get(), packet_.get())) >= 0) {
    av_packet_rescale_ts(packet_.get(), enc_->time_base, st_->time_base);
    packet_->stream_index = st_->index;
    error = av_interleaved_write_frame(fmt_.get(), packet_.get());
    if (error < 0) return internal_error("muxing failed: " + av_error_text(error));
  }
  if (error == AVERROR(EAGAIN) || error == AVERROR_EOF) return Status();
  return internal_error("encoding failed: " + av_error_text(error));
}

// Encodes whole frames from the fifo; `last`: the rest too, as a short final frame.
Status FfmpegWriter::encode_from_fifo(bool last) {
  while (av_audio_fifo_size(fifo_.get()) >= frame_size_ || (last && av_audio_fifo_size(fifo_.get()) > 0)) {
    const int n = std::min(frame_size_, av_audio_fifo_size(fifo_.get()));
    // An encoder that takes no short last frame gets one padded with silence.
    const bool short_ok =
        enc_->codec->capabilities & (AV_CODEC_CAP_SMALL_LAST_FRAME | AV_CODEC_CAP_VARIABLE_FRAME_SIZE);
    av_frame_unref(frame_.get());
    frame_->format = enc_->sample_fmt;
    frame_->sample_rate = enc_->sample_rate;
    frame_->nb_samples = short_ok ? n : frame_size_;
    av_channel_layout_copy(&frame_->ch_layout, &enc_->ch_layout);
    if (av_frame_get_buffer(frame_.get(), 0) < 0) return internal_error("out of memory");
    av_samples_set_silence(frame_->data, 0, frame_->nb_samples, spec_.channels, enc_->sample_fmt);
    if (av_audio_fifo_read(fifo_.get(), reinterpret_cast<void**>(frame_->data), n) != n)
      return internal_error("audio fifo read failed");
    frame_->pts = next_pts_;
    next_pts_ += frame_->nb_samples;
    PRISM_RETURN_IF_ERROR(encode(frame_.get()));
  }
  return Status();
}

Status FfmpegWriter::write(std::span<const float> interleaved) {
  constexpr int kChunkFrames = 4096;
  const int64_t num_frames = int64_t(interleaved.size()) / spec_.channels;
  uint8_t** converted = nullptr;
  const int capacity = swr_get_out_samples(swr_.get(), kChunkFrames) + 256;
  if (av_samples_alloc_array_and_samples(&converted, nullptr, spec_.channels, capacity, enc_->sample_fmt, 0) < 0)
    return internal_error("out of memory");
  // in == null: flush what swresample holds back.
  auto convert = [&](const uint8_t* in, int n) -> Status {
    const int out = swr_convert(swr_.get(), converted, capacity, in ? &in : nullptr, n);
    if (out < 0) return internal_error("swresample: " + av_error_text(out));
    if (av_audio_fifo_write(fifo_.get(), reinterpret_cast<void**>(converted), out) != out)
      return internal_error("audio fifo write failed");
    return encode_from_fifo(false);
  };
  Status status;
  for (int64_t done = 0; status.ok() && done < num_frames; done += kChunkFrames) {
    const int n = int(std::min<int64_t>(kChunkFrames, num_frames - done));
    status = convert(reinterpret_cast<const uint8_t*>(interleaved.data() + done * spec_.channels), n);
  }
  if (status.ok()) status = convert(nullptr, 0);
  av_freep(&converted[0]);
  av_freep(&converted);
  return status;
}

Status FfmpegWriter::finish() {
  PRISM_RETURN_IF_ERROR(encode_from_fifo(true));
  PRISM_RETURN_IF_ERROR(encode(nullptr));
  const int error = av_write_trailer(fmt_.get());
  if (error < 0) return internal_error("cannot write the trailer: " + av_error_text(error));
  avio_flush(io_);
  return Status();
}

Result<std::vector<uint8_t>> write_with_ffmpeg(std::span<const float> interleaved, const AudioSpec& spec) {
  FfmpegWriter writer;
  PRISM_RETURN_IF_ERROR(writer.open(spec));
  PRISM_RETURN_IF_ERROR(writer.write(interleaved));
  PRISM_RETURN_IF_ERROR(writer.finish());
  return writer.take();
}

}  // namespace

std::string audio_format_name(AudioFormat format) {
  switch (format) {
    case AudioFormat::wav_pcm16: return "wav_pcm16";
    case AudioFormat::wav_pcm24: return "wav_pcm24";
    case AudioFormat::wav_float: return "wav_float";
    case AudioFormat::flac: return "flac";
    case AudioFormat::ogg_vorbis: return "ogg_vorbis";
    case AudioFormat::ogg_opus: return "ogg_opus";
    case AudioFormat::mp3: return "mp3";
    case AudioFormat::m4a: return "m4a";
    case AudioFormat::webm: return "webm";
  }
  return "unknown";
}

Result<std::vector<uint8_t>> write_audio(std::span<const float> interleaved, const AudioSpec& spec) {
  if (spec.rate <= 0 || spec.channels <= 0 || interleaved.size() % size_t(spec.channels) != 0)
    return invalid_argument("write_audio: bad rate, channels or sample count");
  if (sndfile_format(spec.format) != 0) return write_with_sndfile(interleaved, spec);
  return write_with_ffmpeg(interleaved, spec);
}

Result<PcmAudio> read_audio_file(const std::string& path) {
  SF_INFO info{};
  SNDFILE* sf = sf_open(path.c_str(), SFM_READ, &info);
  if (!sf) return not_found("libsndfile cannot open " + path + ": " + sf_strerror(nullptr));
  PcmAudio audio;
  audio.rate = info.samplerate;
  audio.channels = info.channels;
  std::vector<float> buffer(size_t(4096) * size_t(info.channels));
  sf_count_t n = 0;
  while ((n = sf_readf_float(sf, buffer.data(), 4096)) > 0)
    audio.interleaved.insert(audio.interleaved.end(), buffer.begin(), buffer.begin() + n * info.channels);
  const int error = sf_error(sf);
  sf_close(sf);
  if (error != SF_ERR_NO_ERROR) return data_loss("libsndfile failed reading " + path + ": " + sf_error_number(error));
  return audio;
}

std::vector<float> sine(double hz, double seconds, int rate, const std::vector<float>& amplitudes) {
  const auto num_frames = size_t(std::llround(seconds * rate));
  const size_t channels = amplitudes.size();
  std::vector<float> out(num_frames * channels);
  for (size_t f = 0; f < num_frames; ++f) {
    const auto value = float(std::sin(2 * std::numbers::pi * hz * double(f) / rate));
    for (size_t c = 0; c < channels; ++c) out[f * channels + c] = amplitudes[c] * value;
  }
  return out;
}

}  // namespace prism::test

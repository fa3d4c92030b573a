// media/audio_resample.cpp: SpeechResampler (media/audio_resample.h) on a streaming soxr
// resampler. soxr runs single-threaded: Prism's only compute pool is runtime/threads.h's.
#include "media/audio_resample.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <soxr.h>

#include "media/audio.h"
#include "media/audio_decoders.h"

namespace prism::media {
namespace {

// NOTE: a decoder may give a little more than the length a header states and decode_audio
// checked (an encoder's padding: 23 ms of AAC), so a file stated at the limit is not refused
// for it.
constexpr double kLimitSlackSeconds = 0.1;

}  // namespace

SpeechResampler::SpeechResampler(double max_seconds) : max_seconds_(max_seconds) {}

SpeechResampler::~SpeechResampler() { soxr_delete(soxr_); }

Status SpeechResampler::start(int rate) {
  soxr_delete(soxr_);
  soxr_ = nullptr;
  rate_ = rate;
  if (rate == kSpeechSampleRate) return Status();
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);
  soxr_error_t error = nullptr;
  soxr_ = soxr_create(rate, kSpeechSampleRate, 1, &error, &io, &quality, &runtime);
  if (error || !soxr_) {
    soxr_delete(soxr_);
    soxr_ = nullptr;
    rate_ = 0;
    return invalid_argument("has a sample rate (" + std::to_string(rate) + " Hz) that cannot be resampled (" +
                            std::string(error ? error : "soxr failed") + ")");
  }
  return Status();
}

// Runs `num_in` samples through soxr, or (in == nullptr) flushes its tail, appending to out_.
Status SpeechResampler::resample(const float* in, size_t num_in) {
  const double ratio = double(kSpeechSampleRate) / rate_;
  size_t consumed = 0;
  while (true) {
    const size_t remaining = in ? num_in - consumed : 0;
    const size_t room = std::max<size_t>(size_t(std::ceil(double(remaining) * ratio)) + 64, 4096);
    const size_t before = out_.size();
    out_.resize(before + room);
    size_t used = 0, produced = 0;
    const soxr_error_t error =
        soxr_process(soxr_, in ? in + consumed : nullptr, remaining, &used, out_.data() + before, room, &produced);
    out_.resize(before + produced);
    if (error) return internal_error(std::string("resampling failed: ") + error);
    consumed += used;
    if (in ? consumed >= num_in || (used == 0 && produced == 0) : produced == 0) return Status();
  }
}

Status SpeechResampler::flush() {
  if (!soxr_) return Status();
  return resample(nullptr, 0);
}

Status SpeechResampler::push(std::span<const float> interleaved, int rate, int channels) {
  if (rate <= 0) return invalid_argument("audio sample rate must be positive, got " + std::to_string(rate));
  if (channels <= 0) return invalid_argument("audio channel count must be positive, got " + std::to_string(channels));
  if (interleaved.size() % size_t(channels) != 0) {
    return invalid_argument("audio of " + std::to_string(channels) + " channels needs a multiple of " +
                            std::to_string(channels) + " samples, got " + std::to_string(interleaved.size()));
  }
  const size_t num_frames = interleaved.size() / size_t(channels);
  source_seconds_ += double(num_frames) / rate;
  if (source_seconds_ > max_seconds_ + kLimitSlackSeconds)
    return invalid_argument("is longer than the limit of " + limit_text(max_seconds_) + " s");
  if (num_frames == 0) return Status();
  if (rate != rate_) {
    PRISM_RETURN_IF_ERROR(flush());
    PRISM_RETURN_IF_ERROR(start(rate));
  }
  // NOTE: NaN or infinity (a float WAV can hold them) would spread through soxr's filter
  // state to every later sample, and on into the log-mel; they are silence here.
  mono_.resize(num_frames);
  const float scale = 1.0f / float(channels);
  for (size_t f = 0; f < num_frames; ++f) {
    const float* frame = interleaved.data() + f * size_t(channels);
    float sum = 0;
    for (int c = 0; c < channels; ++c) sum += std::isfinite(frame[c]) ? frame[c] : 0.0f;
    mono_[f] = sum * scale;
  }
  if (!soxr_) {
    out_.insert(out_.end(), mono_.begin(), mono_.end());
    return Status();
  }
  return resample(mono_.data(), num_frames);
}

Result<std::vector<float>> SpeechResampler::finish() {
  PRISM_RETURN_IF_ERROR(flush());
  soxr_delete(soxr_);
  soxr_ = nullptr;
  rate_ = 0;
  std::vector<float> out = std::move(out_);
  out_.clear();
  return out;
}

}  // namespace prism::media

// media/audio_sndfile.cpp: decode_with_sndfile (media/audio_decoders.h): WAV, FLAC and Ogg
// (Vorbis, Opus) through libsndfile's virtual I/O over the caller's bytes. libsndfile reads
// every integer format as floats in [-1, 1) and float formats as they are.
#include <sndfile.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.h"
#include "media/audio_decoders.h"
#include "media/audio_resample.h"

namespace prism::media {
namespace {

constexpr sf_count_t kSamplesPerRead = 1 << 16;

// The caller's bytes as a read-only file for libsndfile. Seeking past the end is allowed (as
// on a real file; a header can point there), reading there gives nothing.
struct MemoryFile {
  const uint8_t* data = nullptr;
  sf_count_t size = 0;
  sf_count_t pos = 0;
};

sf_count_t file_length(void* user) { return static_cast<MemoryFile*>(user)->size; }

sf_count_t seek_file(sf_count_t offset, int whence, void* user) {
  auto* file = static_cast<MemoryFile*>(user);
  sf_count_t base = 0;
  if (whence == SEEK_CUR) {
    base = file->pos;
  } else if (whence == SEEK_END) {
    base = file->size;
  } else if (whence != SEEK_SET) {
    return -1;
  }
  sf_count_t target = 0;
  if (__builtin_add_overflow(base, offset, &target) || target < 0) return -1;
  file->pos = target;
  return target;
}

sf_count_t read_file(void* destination, sf_count_t count, void* user) {
  auto* file = static_cast<MemoryFile*>(user);
  const sf_count_t n = std::clamp<sf_count_t>(file->size - file->pos, 0, std::max<sf_count_t>(count, 0));
  if (n > 0) std::memcpy(destination, file->data + file->pos, size_t(n));
  file->pos += n;
  return n;
}

sf_count_t write_file(const void*, sf_count_t, void*) { return 0; }

sf_count_t tell_file(void* user) { return static_cast<MemoryFile*>(user)->pos; }

struct CloseSndfile {
  void operator()(SNDFILE* f) const { sf_close(f); }
};

// Audio::format of the containers decoded here; nullptr for any other libsndfile reads.
const char* container_name(int format) {
  switch (format & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
    case SF_FORMAT_RF64: return "wav";
    case SF_FORMAT_FLAC: return "flac";
    case SF_FORMAT_OGG: return "ogg";
    default: return nullptr;
  }
}

}  // namespace

Result<std::optional<Audio>> decode_with_sndfile(std::span<const uint8_t> bytes, const AudioLimits& limits) {
  MemoryFile file{bytes.data(), sf_count_t(bytes.size()), 0};
  SF_VIRTUAL_IO io{file_length, seek_file, read_file, write_file, tell_file};
  SF_INFO info{};
  std::unique_ptr<SNDFILE, CloseSndfile> sf;
  {
    // NOTE: a failed sf_open_virtual writes libsndfile's global error text (a static buffer):
    // opens are serialized so that concurrent requests do not race on it. Decoding is not.
    static std::mutex open_mutex;
    std::lock_guard lock(open_mutex);
    sf.reset(sf_open_virtual(&io, SFM_READ, &info, &file));
  }
  const char* format = sf ? container_name(info.format) : nullptr;
  if (!format) return std::optional<Audio>();
  if (info.channels <= 0 || info.samplerate <= 0) {
    return invalid_argument("is corrupt: its header states " + std::to_string(info.channels) + " channels at " +
                            std::to_string(info.samplerate) + " Hz");
  }
  // libsndfile states SF_COUNT_MAX frames when the header does not say (a streamed FLAC).
  const bool stated = info.frames > 0 && info.frames < std::numeric_limits<sf_count_t>::max();
  if (stated) PRISM_RETURN_IF_ERROR(check_stated_seconds(double(info.frames) / info.samplerate, limits));

  SpeechResampler resampler(limits.max_seconds);
  const sf_count_t frames_per_read = std::max<sf_count_t>(1, kSamplesPerRead / info.channels);
  std::vector<float> buffer(size_t(frames_per_read) * size_t(info.channels));
  sf_count_t num_frames = 0;
  while (true) {
    const sf_count_t n = sf_readf_float(sf.get(), buffer.data(), frames_per_read);
    if (n <= 0) break;
    PRISM_RETURN_IF_ERROR(
        resampler.push({buffer.data(), size_t(n) * size_t(info.channels)}, info.samplerate, info.channels));
    num_frames += n;
  }
  // NOTE: libsndfile stops at the first damaged FLAC frame or Ogg page, with or without an
  // error: its audio is trusted only when all the header states came out cleanly. Anything
  // less (a file cut short, or damaged, or no audio at all) goes to FFmpeg, whose decoders
  // skip a damaged packet and go on, under the same rules as every other format.
  if (const int error = sf_error(sf.get());
      error != SF_ERR_NO_ERROR || num_frames == 0 || (stated && num_frames < info.frames)) {
    PRISM_LOG_DEBUG("libsndfile decoded {} of {} frames of a {} file ({}): FFmpeg decodes it instead", num_frames,
                    info.frames, format, sf_error_number(error));
    return std::optional<Audio>();
  }
  Audio audio;
  audio.format = format;
  audio.source_rate = info.samplerate;
  audio.source_channels = info.channels;
  PRISM_ASSIGN_OR_RETURN(audio.samples, resampler.finish());
  return std::optional<Audio>(std::move(audio));
}

}  // namespace prism::media

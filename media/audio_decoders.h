// media/audio_decoders.h: the two decoders behind decode_audio (media/audio.h), internal to
// media/. Each reads only the caller's bytes (never a file or URL a container names), checks
// a length the header states against the limit before decoding, streams what it decodes
// into a SpeechResampler (media/audio_resample.h), and describes the source in the Audio.
// Their messages are predicates about "the file", as decode_audio's are.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "media/audio.h"

namespace prism::media {

// libsndfile (virtual I/O over the bytes) for WAV, FLAC and Ogg (Vorbis, Opus). nullopt when
// libsndfile cannot open the bytes or does not decode all they state, which decode_audio
// then gives to FFmpeg: a WAV codec or an Ogg codec (Speex, FLAC) it lacks, a header it does
// not read, a FLAC or Ogg file cut short or damaged part way.
Result<std::optional<Audio>> decode_with_sndfile(std::span<const uint8_t> bytes, const AudioLimits& limits);

// The FFmpeg libraries (libavformat over the bytes, libavcodec, libswresample to float) for
// MP3, M4A/AAC, WebM/Opus and every other audio or video container on its list.
Result<Audio> decode_with_ffmpeg(std::span<const uint8_t> bytes, const AudioLimits& limits);

// The audio stream's length as FFmpeg's demuxer reads it from the header (an Ogg file's last
// granule position, an MP3's LAME header, an mp4's index); 0 when it states none. The errors
// of decode_with_ffmpeg when FFmpeg cannot open the bytes or they hold no audio stream. Reads
// the header and the first packets only (and the last page of an Ogg file).
Result<double> ffmpeg_stated_seconds(std::span<const uint8_t> bytes);

// "is 4000.0 s long, more than the limit of 3600 s" when a stated length passes the limit.
Status check_stated_seconds(double seconds, const AudioLimits& limits);
// Whether audio of decoded_seconds falls short of the stated_seconds its header states (0:
// none) by more than headers round and a skipped damaged packet explain.
bool ends_short(double decoded_seconds, double stated_seconds);
// "is corrupt: its audio ends at 2.7 s, but its header states 11.0 s (cut short or damaged)"
// when it does.
Status check_complete(double decoded_seconds, double stated_seconds);
// A limit as messages print it ("%g": 3600, 0.5).
std::string limit_text(double value);

}  // namespace prism::media

// Test videos written with libavcodec / libavformat, in memory or to a file: every frame a
// solid colour that codes its index, so a test knows WHICH frames a sampler kept from their
// colours alone (lossy codecs included: the colours are 64 levels apart per channel).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace prism::test {

using Rgb = std::array<uint8_t, 3>;

// The colour of frame `index`: base-4 digits of index % 64 as levels 32, 96, 160, 224 of
// red, green, blue. Frames 64 apart share a colour; a test tells them apart by timestamp.
Rgb frame_colour(int64_t index);
// The index % 64 whose colour is nearest to `rgb`, and in *distance the largest channel
// difference from it.
int frame_index_of(const Rgb& rgb, int* distance = nullptr);
// The mean colour of an RGB8 image (width * height pixels), rounded.
Rgb mean_colour(const std::vector<uint8_t>& pixels);

struct VideoSpec {
  std::string container = "mp4";  // FFmpeg muxer: "mp4", "webm", "matroska", "avi", ...
  std::string codec = "mpeg4";    // FFmpeg encoder: "mpeg4", "libvpx", "libvpx-vp9", "ffv1", "libx264", ...
  int width = 64, height = 48;    // even: 4:2:0 chroma
  int fps = 10;
  int num_frames = 40;
  int gop_size = 0;               // frames between keyframes; 0: the encoder's default
  int max_b_frames = 0;
  bool seekable = true;           // false: the muxer writes a stream (no index, no duration in mkv)
  bool faststart = false;         // mp4: the index before the data (write_video_file only)
  // false: packets leave their duration unset, as some muxing tools do (an mp4's last frame
  // then lasts 0 and its stated frame rate is off: 40 frames in 3.9 s).
  bool packet_durations = true;
  // Instead of video: one audio stream of num_frames / fps seconds of silence, encoded with
  // `codec` (e.g. "pcm_s16le" in matroska, "aac" in mp4).
  bool audio_only = false;
};

// Whether this libavcodec has the encoder (Debian's may lack libvpx, libx264, ...).
bool has_encoder(const std::string& name);

Result<std::vector<uint8_t>> write_video(const VideoSpec& spec);
Status write_video_file(const VideoSpec& spec, const std::string& path);

}  // namespace prism::test

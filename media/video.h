// media/video.h: frames sampled out of a video file (mp4, webm, mkv, ... whatever the FFmpeg
// libraries demux and decode), decoded from memory, converted to RGB and scaled down to a
// per-frame cap. Which frames: `num_frames` evenly spread (frame indices linspace(0, total-1,
// n) at the stream's rate, as vLLM picks them), else one every 1/fps seconds, never more than
// max_frames (then spread evenly instead). A target takes the first frame at or after it,
// within half a frame.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "media/image.h"

namespace prism::media {

struct VideoSampling {
  double fps = 1.0;        // frames per second of video to keep (when num_frames is 0)
  int num_frames = 0;      // > 0: exactly this many (fewer when the video has fewer)
  int max_frames = 16;     // cap on either rule: 1..10000
  int max_side = 0;        // > 0: frames scaled (aspect kept) so their longest side is at most this
};

struct VideoLimits {
  int64_t max_bytes = 256ll << 20;
  double max_seconds = 600;       // longer videos are refused
  int64_t max_frame_pixels = 8'294'400;  // 3840 x 2160
};

struct VideoFrames {
  std::vector<Image> frames;
  std::vector<double> timestamps;  // seconds, one per frame
  double duration = 0;             // seconds
  double native_fps = 0;
  int width = 0, height = 0;       // the stream's, before scaling
};

// invalid_argument with a predicate message ("is not a video FFmpeg can read", "has no video
// stream", "is 1200.0 s long, more than the limit of 600 s", "is corrupt: ...") for bad input.
Result<VideoFrames> decode_video(std::span<const uint8_t> bytes, const VideoSampling& sampling,
                                 const VideoLimits& limits = {});

}  // namespace prism::media

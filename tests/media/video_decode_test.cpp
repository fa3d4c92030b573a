// decode_video on videos written by test_util/video_writer (mp4, webm, mkv; mpeg4, VP8, VP9,
// FFV1, H.264 with B-frames where this libavcodec has the encoder): which frames each
// sampling rule keeps, known by their colours and timestamps, scaling, and the seeking path
// on a long video.
#include "media/video.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util/video_writer.h"

namespace prism::media {
namespace {

using test::VideoSpec;

std::vector<uint8_t> write_or_die(const VideoSpec& spec) {
  Result<std::vector<uint8_t>> bytes = test::write_video(spec);
  EXPECT_TRUE(bytes.has_value()) << bytes.status().to_string();
  return bytes.has_value() ? std::move(bytes).value() : std::vector<uint8_t>{};
}

// numpy's np.linspace(0, total - 1, n).astype(int): HF's and vLLM's frame indices.
std::vector<int64_t> linspace_indices(int64_t total, int n) {
  std::vector<int64_t> out;
  const double step = n > 1 ? double(total - 1) / double(n - 1) : 0;
  for (int i = 0; i < n; ++i) out.push_back(i == n - 1 && n > 1 ? total - 1 : int64_t(i * step));
  return out;
}

std::vector<int64_t> every(int64_t first, int64_t step, int64_t count) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(first + i * step);
  return out;
}

// The frames kept are exactly `indices` of a video at `fps`: by timestamp and by colour.
void expect_frames(const VideoFrames& v, const std::vector<int64_t>& indices, int fps, int max_distance = 16) {
  ASSERT_EQ(v.frames.size(), indices.size());
  ASSERT_EQ(v.timestamps.size(), indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    EXPECT_NEAR(v.timestamps[i], double(indices[i]) / fps, 1e-3) << "frame " << i;
    int distance = 0;
    const test::Rgb mean = test::mean_colour(v.frames[i].pixels);
    EXPECT_EQ(test::frame_index_of(mean, &distance), indices[i] % 64) << "frame " << i;
    EXPECT_LE(distance, max_distance) << "frame " << i << ": colour " << int(mean[0]) << "," << int(mean[1]) << ","
                                      << int(mean[2]);
  }
}

struct Format {
  const char* name;
  const char* container;
  const char* codec;
  bool seekable;
  int max_b_frames;
};

class VideoFormats : public testing::TestWithParam<Format> {};

TEST_P(VideoFormats, OneFramePerSecondOfAFourSecondClip) {
  const Format f = GetParam();
  if (!test::has_encoder(f.codec)) GTEST_SKIP() << "this libavcodec has no " << f.codec << " encoder";
  VideoSpec spec{.container = f.container, .codec = f.codec, .fps = 10, .num_frames = 40};
  spec.seekable = f.seekable;
  spec.max_b_frames = f.max_b_frames;
  const std::vector<uint8_t> bytes = write_or_die(spec);
  Result<VideoFrames> v = decode_video(bytes, VideoSampling{});  // 1 fps, at most 16
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->width, 64);
  EXPECT_EQ(v->height, 48);
  EXPECT_NEAR(v->duration, 4.0, 0.05);
  EXPECT_NEAR(v->native_fps, 10.0, 0.05);
  expect_frames(*v, {0, 10, 20, 30}, 10);
  for (const Image& frame : v->frames) {
    EXPECT_EQ(frame.width, 64);
    EXPECT_EQ(frame.height, 48);
    EXPECT_EQ(frame.pixels.size(), size_t(64 * 48 * 3));
  }
}

TEST_P(VideoFormats, NumFramesAreHfLinspaceIndices) {
  const Format f = GetParam();
  if (!test::has_encoder(f.codec)) GTEST_SKIP() << "this libavcodec has no " << f.codec << " encoder";
  VideoSpec spec{.container = f.container, .codec = f.codec, .fps = 10, .num_frames = 40};
  spec.seekable = f.seekable;
  spec.max_b_frames = f.max_b_frames;
  const std::vector<uint8_t> bytes = write_or_die(spec);
  Result<VideoFrames> v = decode_video(bytes, VideoSampling{.num_frames = 7});
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  expect_frames(*v, linspace_indices(40, 7), 10);  // 0, 6, 13, 19, 26, 32, 39
}

INSTANTIATE_TEST_SUITE_P(Decode, VideoFormats,
                         testing::Values(Format{"mp4_mpeg4", "mp4", "mpeg4", true, 0},
                                         Format{"webm_vp8", "webm", "libvpx", true, 0},
                                         Format{"webm_vp9", "webm", "libvpx-vp9", true, 0},
                                         Format{"mkv_ffv1", "matroska", "ffv1", true, 0},
                                         // Written as a stream: no duration and no index in the file.
                                         Format{"mkv_stream", "matroska", "mpeg4", false, 0},
                                         Format{"mp4_h264_bframes", "mp4", "libx264", true, 2},
                                         Format{"avi_mpeg4", "avi", "mpeg4", true, 0}),
                         [](const testing::TestParamInfo<Format>& info) { return std::string(info.param.name); });

class VideoSamplingTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    bytes_ = new std::vector<uint8_t>(write_or_die(VideoSpec{.fps = 10, .num_frames = 40}));
  }
  static void TearDownTestSuite() { delete bytes_; }
  static Result<VideoFrames> decode(const VideoSampling& s) { return decode_video(*bytes_, s); }
  static std::vector<uint8_t>* bytes_;  // a 4-s mp4 at 10 fps
};
std::vector<uint8_t>* VideoSamplingTest::bytes_ = nullptr;

TEST_F(VideoSamplingTest, FpsBelowOne) {
  Result<VideoFrames> v = decode({.fps = 0.5});
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  expect_frames(*v, {0, 20}, 10);
}

TEST_F(VideoSamplingTest, FpsCappedByMaxFramesIsSpreadEvenly) {
  // 5 fps over 4 s would be 20 frames; 8 are spread over the whole clip instead.
  Result<VideoFrames> v = decode({.fps = 5, .max_frames = 8});
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  expect_frames(*v, linspace_indices(40, 8), 10);
}

TEST_F(VideoSamplingTest, NumFramesCappedByMaxFrames) {
  Result<VideoFrames> v = decode({.num_frames = 10, .max_frames = 4});
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  expect_frames(*v, {0, 13, 26, 39}, 10);
}

TEST_F(VideoSamplingTest, MoreFramesThanTheVideoHasGivesEachOnce) {
  Result<VideoFrames> by_count = decode({.num_frames = 100, .max_frames = 100});
  ASSERT_TRUE(by_count.has_value()) << by_count.status().to_string();
  expect_frames(*by_count, every(0, 1, 40), 10);
  Result<VideoFrames> by_rate = decode({.fps = 25, .max_frames = 200});  // faster than the video's 10
  ASSERT_TRUE(by_rate.has_value()) << by_rate.status().to_string();
  expect_frames(*by_rate, every(0, 1, 40), 10);
}

TEST_F(VideoSamplingTest, OneFrame) {
  Result<VideoFrames> v = decode({.num_frames = 1});
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  expect_frames(*v, {0}, 10);
}

TEST_F(VideoSamplingTest, MaxSideScalesKeepingAspect) {
  Result<VideoFrames> v = decode({.num_frames = 2, .max_side = 25});  // 64x48 → 25x19 (18.75 rounded)
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->width, 64);  // the stream's
  EXPECT_EQ(v->height, 48);
  for (const Image& frame : v->frames) {
    EXPECT_EQ(frame.width, 25);
    EXPECT_EQ(frame.height, 19);
    EXPECT_EQ(frame.pixels.size(), size_t(25 * 19 * 3));
  }
  expect_frames(*v, {0, 39}, 10);
  Result<VideoFrames> unscaled = decode({.num_frames = 1, .max_side = 64});  // already within
  ASSERT_TRUE(unscaled.has_value());
  EXPECT_EQ(unscaled->frames[0].width, 64);
  EXPECT_EQ(unscaled->frames[0].height, 48);
}

// Packets without durations: the mp4's last frame lasts 0, so it states 40 frames in 3.9 s
// (10.26 fps on average); frames are still found by the stream's base rate of 10. Its edit
// list ends at 3.9 s, which hides frame 39: the last target gets the last frame shown.
TEST(VideoTimeline, Mp4WithoutFrameDurations) {
  VideoSpec spec{.fps = 10, .num_frames = 40};
  spec.packet_durations = false;
  const std::vector<uint8_t> bytes = write_or_die(spec);
  Result<VideoFrames> by_rate = decode_video(bytes, {});
  ASSERT_TRUE(by_rate.has_value()) << by_rate.status().to_string();
  EXPECT_NEAR(by_rate->duration, 3.9, 0.01);
  EXPECT_NEAR(by_rate->native_fps, 10.0, 1e-6);
  expect_frames(*by_rate, {0, 10, 20, 30}, 10);
  Result<VideoFrames> by_count = decode_video(bytes, {.num_frames = 7});
  ASSERT_TRUE(by_count.has_value()) << by_count.status().to_string();
  expect_frames(*by_count, {0, 6, 13, 19, 26, 32, 38}, 10);
}

TEST(VideoScaling, PortraitFramesScaleByTheirHeight) {
  const std::vector<uint8_t> bytes = write_or_die(VideoSpec{.width = 96, .height = 160, .fps = 5, .num_frames = 5});
  Result<VideoFrames> v = decode_video(bytes, {.num_frames = 1, .max_side = 40});
  ASSERT_TRUE(v.has_value()) << v.status().to_string();
  EXPECT_EQ(v->width, 96);
  EXPECT_EQ(v->height, 160);
  EXPECT_EQ(v->frames[0].width, 24);
  EXPECT_EQ(v->frames[0].height, 40);
  expect_frames(*v, {0}, 5);
}

// A 30-s clip with a keyframe every second: the decoder seeks between far-apart targets
// (mp4 and webm indexes; H.264 with B-frames, whose index holds decode times), and the
// frames kept are still exactly the ones meant.
TEST(VideoSeeking, LongClipSampledSparsely) {
  const Format formats[] = {
      {"mp4", "mp4", "mpeg4", true, 0}, {"webm", "webm", "libvpx", true, 0}, {"h264", "mp4", "libx264", true, 2}};
  for (const Format& f : formats) {
    SCOPED_TRACE(f.name);
    if (!test::has_encoder(f.codec)) continue;
    VideoSpec spec{.container = f.container, .codec = f.codec, .fps = 10, .num_frames = 300, .gop_size = 10};
    spec.max_b_frames = f.max_b_frames;
    const std::vector<uint8_t> bytes = write_or_die(spec);
    Result<VideoFrames> by_rate = decode_video(bytes, {.fps = 0.2});
    ASSERT_TRUE(by_rate.has_value()) << by_rate.status().to_string();
    expect_frames(*by_rate, every(0, 50, 6), 10);  // 0, 5, 10, 15, 20, 25 s
    Result<VideoFrames> by_count = decode_video(bytes, {.num_frames = 9});
    ASSERT_TRUE(by_count.has_value()) << by_count.status().to_string();
    expect_frames(*by_count, linspace_indices(300, 9), 10);
  }
}

}  // namespace
}  // namespace prism::media

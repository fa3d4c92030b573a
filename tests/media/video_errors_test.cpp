// decode_video on bad input: every case ends in an invalid_argument predicate (or, for a
// damaged but partly readable file, frames that are really in it), never a crash: random
// bytes, truncated mp4s (index at the end / at the start), bit flips, audio-only files,
// playlists that point elsewhere, and each limit.
#include "media/video.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "test_util/paths.h"
#include "test_util/video_writer.h"

namespace prism::media {
namespace {

using test::VideoSpec;

std::vector<uint8_t> write_or_die(const VideoSpec& spec) {
  Result<std::vector<uint8_t>> bytes = test::write_video(spec);
  EXPECT_TRUE(bytes.has_value()) << bytes.status().to_string();
  return bytes.has_value() ? std::move(bytes).value() : std::vector<uint8_t>{};
}

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void expect_invalid(const Result<VideoFrames>& v, const std::string& message_part) {
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.status().code(), StatusCode::invalid_argument) << v.status().to_string();
  EXPECT_NE(v.status().message().find(message_part), std::string::npos) << v.status().message();
}

// Either an invalid_argument, or frames whose colours are frames of the video.
void expect_refused_or_real(const Result<VideoFrames>& v) {
  if (!v.has_value()) {
    EXPECT_EQ(v.status().code(), StatusCode::invalid_argument) << v.status().to_string();
    return;
  }
  ASSERT_FALSE(v->frames.empty());
  ASSERT_EQ(v->frames.size(), v->timestamps.size());
  for (const Image& frame : v->frames) {
    ASSERT_GT(frame.width, 0);
    ASSERT_EQ(frame.pixels.size(), size_t(frame.width) * frame.height * 3);
  }
}

TEST(VideoErrors, EmptyAndRandomBytes) {
  expect_invalid(decode_video({}, {}), "is empty");
  std::mt19937 rng(11);
  for (size_t size : {1, 7, 100, 4096, 100000}) {
    std::vector<uint8_t> bytes(size);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    const Result<VideoFrames> v = decode_video(bytes, {});
    ASSERT_FALSE(v.has_value()) << size;
    EXPECT_EQ(v.status().code(), StatusCode::invalid_argument) << v.status().to_string();
  }
  expect_invalid(decode_video(as_bytes("hello, this is text and not a video at all\n"), {}), "not a video");
}

TEST(VideoErrors, ContainerHeadersFollowedByGarbage) {
  std::mt19937 rng(5);
  const std::string heads[] = {
      std::string("\x00\x00\x00\x18"
                  "ftypisom\x00\x00\x02\x00isomiso2",
                  24),                                                          // mp4
      std::string("\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01", 13),  // EBML (mkv / webm)
      std::string("RIFF\x10\x00\x00\x00"
                  "AVI LIST",
                  16)};
  for (const std::string& head : heads) {
    std::vector<uint8_t> bytes(head.begin(), head.end());
    for (int i = 0; i < 5000; ++i) bytes.push_back(uint8_t(rng()));
    const Result<VideoFrames> v = decode_video(bytes, {});
    ASSERT_FALSE(v.has_value());
    EXPECT_EQ(v.status().code(), StatusCode::invalid_argument) << v.status().to_string();
  }
}

TEST(VideoErrors, TruncatedMp4WithItsIndexAtTheEnd) {
  const std::vector<uint8_t> bytes = write_or_die(VideoSpec{.num_frames = 40});
  for (double fraction : {0.0001, 0.1, 0.5, 0.9}) {
    const std::span<const uint8_t> cut(bytes.data(), size_t(double(bytes.size()) * fraction));
    const Result<VideoFrames> v = decode_video(cut, {});
    ASSERT_FALSE(v.has_value()) << fraction;  // no moov atom: nothing says where frames are
    EXPECT_EQ(v.status().code(), StatusCode::invalid_argument) << v.status().to_string();
  }
  // Cut inside the index itself: refused, or read as far as it goes.
  for (size_t cut = 1; cut < 400; cut += 7)
    expect_refused_or_real(decode_video(std::span<const uint8_t>(bytes.data(), bytes.size() - cut), {}));
}

TEST(VideoErrors, TruncatedMp4WithItsIndexFirstKeepsWhatIsThere) {
  const std::string path = test::scratch_dir("video_errors") + "/faststart.mp4";
  const Status written = test::write_video_file(VideoSpec{.num_frames = 40, .faststart = true}, path);
  ASSERT_TRUE(written.ok()) << written.to_string();
  Result<std::string> file = read_file(path);
  ASSERT_TRUE(file.has_value());
  const std::span<const uint8_t> whole = as_bytes(*file);
  ASSERT_TRUE(decode_video(whole, {}).has_value());
  for (double fraction : {0.05, 0.3, 0.6, 0.95}) {
    SCOPED_TRACE(fraction);
    const Result<VideoFrames> v = decode_video(whole.first(size_t(double(whole.size()) * fraction)), {});
    expect_refused_or_real(v);
    if (v.has_value()) {  // the frames kept are the sampled ones that the cut left
      for (size_t i = 0; i < v->frames.size(); ++i) {
        int distance = 0;
        const int index = test::frame_index_of(test::mean_colour(v->frames[i].pixels), &distance);
        EXPECT_LE(distance, 16);
        EXPECT_NEAR(v->timestamps[i], index / 10.0, 1e-3);
      }
    }
  }
}

TEST(VideoErrors, BitFlipsNeverCrash) {
  std::vector<std::vector<uint8_t>> videos = {write_or_die(VideoSpec{.num_frames = 20})};
  if (test::has_encoder("libvpx"))
    videos.push_back(write_or_die(VideoSpec{.container = "webm", .codec = "libvpx", .num_frames = 20}));
  videos.push_back(write_or_die(VideoSpec{.container = "matroska", .codec = "ffv1", .num_frames = 20}));
  std::mt19937 rng(3);
  for (const std::vector<uint8_t>& clean : videos) {
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<uint8_t> bytes = clean;
      const int flips = 1 + int(rng() % 16);
      for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] ^= uint8_t(1u << (rng() % 8));
      expect_refused_or_real(decode_video(bytes, {.num_frames = 4}));
    }
  }
}

TEST(VideoErrors, AudioOnlyFiles) {
  expect_invalid(
      decode_video(write_or_die(VideoSpec{.container = "matroska", .codec = "pcm_s16le", .audio_only = true}), {}),
      "has no video stream");
  if (test::has_encoder("aac")) {
    expect_invalid(decode_video(write_or_die(VideoSpec{.container = "mp4", .codec = "aac", .audio_only = true}), {}),
                   "has no video stream");
  }
  // A WAV file is not demuxed as video at all.
  expect_invalid(
      decode_video(write_or_die(VideoSpec{.container = "wav", .codec = "pcm_s16le", .audio_only = true}), {}),
      "is not a video (FFmpeg reads it as WAV");
}

// A playlist naming other files (or URLs) is refused before anything is opened.
TEST(VideoErrors, PlaylistsAreNotFollowed) {
  const std::string hls =
      "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:10\n#EXTINF:10.0,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n";
  const Result<VideoFrames> v = decode_video(as_bytes(hls), {});
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.status().code(), StatusCode::invalid_argument);
  const std::string concat = "ffconcat version 1.0\nfile /etc/passwd\n";
  EXPECT_FALSE(decode_video(as_bytes(concat), {}).has_value());
}

TEST(VideoErrors, Limits) {
  const std::vector<uint8_t> bytes = write_or_die(VideoSpec{.fps = 10, .num_frames = 40});  // 64x48, 4 s
  expect_invalid(decode_video(bytes, {}, {.max_bytes = int64_t(bytes.size()) - 1}), "bytes, more than the limit of");
  expect_invalid(decode_video(bytes, {}, {.max_seconds = 2}), "is 4.0 s long, more than the limit of 2 s");
  expect_invalid(decode_video(bytes, {}, {.max_frame_pixels = 3071}),
                 "has 64x48 frames, more than the limit of 3071 pixels");
  EXPECT_TRUE(
      decode_video(bytes, {}, {.max_bytes = int64_t(bytes.size()), .max_seconds = 4.0, .max_frame_pixels = 3072})
          .has_value());
  // Without a stated duration (mkv written as a stream) the limit holds too.
  const std::vector<uint8_t> stream = write_or_die(
      VideoSpec{.container = "matroska", .codec = "mpeg4", .fps = 10, .num_frames = 40, .seekable = false});
  expect_invalid(decode_video(stream, {}, {.max_seconds = 2}), "more than the limit of 2 s");
}

TEST(VideoErrors, SamplingArguments) {
  const std::vector<uint8_t> bytes = write_or_die(VideoSpec{.num_frames = 10});
  expect_invalid(decode_video(bytes, {.fps = 0}), "fps > 0 or num_frames > 0");
  expect_invalid(decode_video(bytes, {.fps = -1}), "fps > 0 or num_frames > 0");
  expect_invalid(decode_video(bytes, {.max_frames = 0}), "max_frames in 1..10000");
  expect_invalid(decode_video(bytes, {.num_frames = 20000, .max_frames = 20000}), "max_frames in 1..10000");
  EXPECT_TRUE(decode_video(bytes, {.fps = 0, .num_frames = 3}).has_value());
}

}  // namespace
}  // namespace prism::media

// The bulk job's output folder: appends become durable only at checkpoints; reopening for
// resume cuts torn tails back to the checkpoint; folders of another space, dims or precision
// and non-empty folders without --resume are refused; one writer at a time; numpy reads it.
#include "app/embed_output.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "pipelines/search/vector_index.h"
#include "test_util/paths.h"

namespace prism::app {
namespace {

namespace fs = std::filesystem;

EmbeddingMetadata meta(int64_t dims = 3, std::string space = "space-a", std::string precision = "f32") {
  return {"/models/m", std::move(space), dims, true, "mean", std::move(precision)};
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> rows(int64_t n, int64_t dims, float base) {
  std::vector<float> v(static_cast<size_t>(n * dims));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return v;
}

int64_t npy_rows(const std::string& dir) {
  auto shape = pipelines::search::parse_npy_f32_header(slurp(dir + "/vectors.npy"));
  EXPECT_TRUE(shape.has_value());
  return shape.has_value() ? shape->rows : -1;
}

TEST(EmbedOutput, NewJobAppendCheckpointAndFiles) {
  const std::string dir = test::scratch_dir("embed_output_new") + "/out";  // created by open
  auto out = EmbeddingOutput::open(dir, meta(), /*resume=*/false);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(out.value()->committed(), 0);
  EXPECT_EQ(out.value()->resume_token(), "");
  const std::vector<std::string> ids = {"a", "b \"quoted\"", "c\nnewline"};
  ASSERT_TRUE(out.value()->append(ids, rows(3, 3, 0)).ok());
  EXPECT_EQ(out.value()->appended(), 3);
  EXPECT_EQ(out.value()->committed(), 0);
  ASSERT_TRUE(out.value()->checkpoint("token-1").ok());
  EXPECT_EQ(out.value()->committed(), 3);
  EXPECT_EQ(out.value()->resume_token(), "token-1");

  EXPECT_EQ(npy_rows(dir), 3);
  EXPECT_EQ(fs::file_size(dir + "/vectors.npy"), static_cast<uintmax_t>(pipelines::search::kNpyHeaderBytes + 3 * 3 * 4));
  EXPECT_EQ(slurp(dir + "/ids.jsonl"), "\"a\"\n\"b \\\"quoted\\\"\"\n\"c\\nnewline\"\n");
  auto m = nlohmann::json::parse(slurp(dir + "/metadata.json"));
  EXPECT_EQ(m["space_id"], "space-a");
  EXPECT_EQ(m["dims"], 3);
  EXPECT_EQ(m["normalized"], true);
  EXPECT_EQ(m["pooling"], "mean");
  EXPECT_EQ(m["precision"], "f32");
  EXPECT_EQ(m["model"], "/models/m");
  EXPECT_EQ(m["docs"], 3);
  auto c = nlohmann::json::parse(slurp(dir + "/checkpoint.json"));
  EXPECT_EQ(c["docs"], 3);
  EXPECT_EQ(c["resume_token"], "token-1");
  EXPECT_EQ(out.value()->append({}, {}).ok(), true);
  EXPECT_FALSE(out.value()->append(ids, rows(2, 3, 0)).ok()) << "3 ids need 9 values";
}

TEST(EmbedOutput, NumpyLoadsTheVectors) {
  const std::string dir = test::scratch_dir("embed_output_numpy");
  {
    auto out = EmbeddingOutput::open(dir, meta(4), false);
    ASSERT_TRUE(out.has_value()) << out.status().message();
    ASSERT_TRUE(out.value()->append(std::vector<std::string>{"x", "y"}, rows(2, 4, 0.5f)).ok());
    ASSERT_TRUE(out.value()->checkpoint("t").ok());
  }
  const std::string cmd = test::python() + " -c \"import numpy; a = numpy.load('" + dir +
                          "/vectors.npy'); print(a.dtype, a.shape, float(a[1, 3]))\"";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256] = {};
  const size_t n = fread(buf, 1, sizeof buf - 1, p);
  ASSERT_EQ(pclose(p), 0) << buf;
  EXPECT_EQ(std::string(buf, n), "float32 (2, 4) 7.5\n");
}

// What a kill -9 leaves: rows appended after the last checkpoint, partly written, and a
// header that already counts them. Resume keeps exactly the committed rows.
TEST(EmbedOutput, ResumeTruncatesTornTails) {
  const std::string dir = test::scratch_dir("embed_output_torn");
  {
    auto out = EmbeddingOutput::open(dir, meta(), false);
    ASSERT_TRUE(out.has_value());
    ASSERT_TRUE(out.value()->append(std::vector<std::string>{"a", "b"}, rows(2, 3, 0)).ok());
    ASSERT_TRUE(out.value()->checkpoint("after-b").ok());
    ASSERT_TRUE(out.value()->append(std::vector<std::string>{"c"}, rows(1, 3, 100)).ok());
    // Destroyed without a checkpoint: "c" is appended but not committed.
  }
  {
    std::ofstream(dir + "/vectors.npy", std::ios::app | std::ios::binary) << "torn";
    std::ofstream(dir + "/ids.jsonl", std::ios::app | std::ios::binary) << "\"half";
    std::ofstream(dir + "/checkpoint.json.tmp") << "{garbage";
  }
  auto out = EmbeddingOutput::open(dir, meta(), /*resume=*/true);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(out.value()->committed(), 2);
  EXPECT_EQ(out.value()->appended(), 2);
  EXPECT_EQ(out.value()->resume_token(), "after-b");
  EXPECT_EQ(slurp(dir + "/ids.jsonl"), "\"a\"\n\"b\"\n");
  EXPECT_EQ(fs::file_size(dir + "/vectors.npy"), static_cast<uintmax_t>(pipelines::search::kNpyHeaderBytes + 2 * 3 * 4));
  EXPECT_EQ(npy_rows(dir), 2);
  EXPECT_FALSE(fs::exists(dir + "/checkpoint.json.tmp"));

  // Continue: the next rows follow the committed ones.
  ASSERT_TRUE(out.value()->append(std::vector<std::string>{"c2"}, rows(1, 3, 7)).ok());
  ASSERT_TRUE(out.value()->checkpoint("after-c2").ok());
  EXPECT_EQ(slurp(dir + "/ids.jsonl"), "\"a\"\n\"b\"\n\"c2\"\n");
  const std::string bytes = slurp(dir + "/vectors.npy");
  std::vector<float> back(9);
  std::memcpy(back.data(), bytes.data() + pipelines::search::kNpyHeaderBytes, 9 * sizeof(float));
  EXPECT_EQ(back, (std::vector<float>{0, 1, 2, 3, 4, 5, 7, 8, 9}));
}

TEST(EmbedOutput, ResumeBeforeTheFirstCheckpoint) {
  const std::string dir = test::scratch_dir("embed_output_early");
  {
    auto out = EmbeddingOutput::open(dir, meta(), false);
    ASSERT_TRUE(out.has_value());
    ASSERT_TRUE(out.value()->append(std::vector<std::string>{"a"}, rows(1, 3, 0)).ok());
  }
  fs::remove(dir + "/checkpoint.json");  // killed before even the initial checkpoint landed
  auto out = EmbeddingOutput::open(dir, meta(), true);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(out.value()->committed(), 0);
  EXPECT_EQ(slurp(dir + "/ids.jsonl"), "");
  EXPECT_EQ(npy_rows(dir), 0);
}

TEST(EmbedOutput, ResumeOnAnEmptyOrAbsentDirStartsANewJob) {
  const std::string dir = test::scratch_dir("embed_output_resume_new");
  auto out = EmbeddingOutput::open(dir + "/absent", meta(), true);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(out.value()->committed(), 0);
  auto out2 = EmbeddingOutput::open(dir + "/empty_dir_is_fine", meta(), true);
  EXPECT_TRUE(out2.has_value());
}

TEST(EmbedOutput, RefusesOtherSpacesDimsPrecisionAndNonEmptyDirs) {
  const std::string dir = test::scratch_dir("embed_output_refuse");
  {
    auto out = EmbeddingOutput::open(dir, meta(), false);
    ASSERT_TRUE(out.has_value());
    ASSERT_TRUE(out.value()->append(std::vector<std::string>{"a"}, rows(1, 3, 0)).ok());
    ASSERT_TRUE(out.value()->checkpoint("t").ok());
  }
  for (bool resume : {false, true}) {
    auto other_space = EmbeddingOutput::open(dir, meta(3, "space-b"), resume);
    ASSERT_FALSE(other_space.has_value());
    EXPECT_EQ(other_space.status().code(), StatusCode::failed_precondition);
    EXPECT_NE(other_space.status().message().find("made in another embedding space"), std::string::npos)
        << other_space.status().message();
    auto other_dims = EmbeddingOutput::open(dir, meta(2), resume);
    ASSERT_FALSE(other_dims.has_value());
    EXPECT_NE(other_dims.status().message().find("another embedding space"), std::string::npos);
  }
  auto no_resume = EmbeddingOutput::open(dir, meta(), false);
  ASSERT_FALSE(no_resume.has_value());
  EXPECT_NE(no_resume.status().message().find("--resume"), std::string::npos) << no_resume.status().message();
  auto other_precision = EmbeddingOutput::open(dir, meta(3, "space-a", "bf16"), true);
  ASSERT_FALSE(other_precision.has_value());
  EXPECT_NE(other_precision.status().message().find("--precision f32"), std::string::npos);

  const std::string foreign = test::scratch_dir("embed_output_foreign");
  std::ofstream(foreign + "/notes.txt") << "mine";
  for (bool resume : {false, true}) {
    auto out = EmbeddingOutput::open(foreign, meta(), resume);
    ASSERT_FALSE(out.has_value());
    EXPECT_NE(out.status().message().find("holds no `prism embed` job"), std::string::npos);
  }
  EXPECT_EQ(slurp(foreign + "/notes.txt"), "mine") << "a refused folder is left alone";
}

TEST(EmbedOutput, OneWriterAtATime) {
  const std::string dir = test::scratch_dir("embed_output_lock");
  auto first = EmbeddingOutput::open(dir, meta(), false);
  ASSERT_TRUE(first.has_value());
  auto second = EmbeddingOutput::open(dir, meta(), true);
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.status().message().find("in use by another"), std::string::npos) << second.status().message();
  first.value().reset();
  EXPECT_TRUE(EmbeddingOutput::open(dir, meta(), true).has_value()) << "the lock goes with the writer";
}

TEST(EmbedOutput, DamagedFoldersAreDataLoss) {
  const std::string dir = test::scratch_dir("embed_output_damaged");
  {
    auto out = EmbeddingOutput::open(dir, meta(), false);
    ASSERT_TRUE(out.has_value());
    ASSERT_TRUE(out.value()->append(std::vector<std::string>{"a", "b"}, rows(2, 3, 0)).ok());
    ASSERT_TRUE(out.value()->checkpoint("t").ok());
  }
  fs::resize_file(dir + "/vectors.npy", pipelines::search::kNpyHeaderBytes + 4);  // committed rows lost
  auto out = EmbeddingOutput::open(dir, meta(), true);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.status().code(), StatusCode::data_loss);
  EXPECT_NE(out.status().message().find("damaged"), std::string::npos);
}

}  // namespace
}  // namespace prism::app

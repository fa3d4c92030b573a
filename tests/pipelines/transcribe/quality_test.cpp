// quality.h: compression_ratio identical to whisper's Python (len(b) / len(zlib.compress(b)),
// computed by /usr/bin/python3 during the test on the same strings), judge()'s three
// verdicts in whisper's order, and the temperature ladder.
#include "pipelines/transcribe/quality.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util/paths.h"

namespace prism::pipelines::transcribe {
namespace {

std::vector<std::string> sample_texts() {
  std::vector<std::string> texts = {
      "a",
      " And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
      "Thank you. Thank you. Thank you. Thank you. Thank you. Thank you. Thank you. Thank you. Thank you.",
      "Ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja, ja.",
      "日本語のテキストです。日本語のテキストです。",
      "Ça a été très, très bien — merci beaucoup !",
  };
  std::mt19937 rng(3);
  for (int n : {5, 50, 300, 2000}) {
    std::string s;
    for (int i = 0; i < n; ++i) s += char('a' + std::uniform_int_distribution<int>(0, 25)(rng));
    texts.push_back(s);
    std::string rep;
    while (int(rep.size()) < n) rep += "la la land ";
    texts.push_back(rep);
  }
  return texts;
}

TEST(Quality, CompressionRatioEqualsPythonZlib) {
  const std::vector<std::string> texts = sample_texts();
  const std::string dir = test::scratch_dir("quality_test");
  const std::string in = dir + "/texts.json";
  std::ofstream(in) << nlohmann::json(texts).dump();
  // whisper's utils.compression_ratio, verbatim in meaning.
  const std::string cmd = test::python() +
                          " -c \"import json, sys, zlib; t = json.load(open(sys.argv[1], encoding='utf-8')); "
                          "print(json.dumps([len(s.encode()) / len(zlib.compress(s.encode())) for s in t]))\" " +
                          in;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << out;
  const nlohmann::json want = nlohmann::json::parse(out);
  ASSERT_EQ(want.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_FLOAT_EQ(compression_ratio(texts[i]), want[i].get<double>()) << texts[i];
}

TEST(Quality, CompressionRatioOfEmptyTextIsZero) { EXPECT_EQ(compression_ratio(""), 0.0f); }

TEST(Quality, RepetitionLoopsExceedTheThreshold) {
  std::string loop;
  for (int i = 0; i < 40; ++i) loop += " I'm going to go to the store.";
  EXPECT_GT(compression_ratio(loop), 2.4f);
  EXPECT_LT(compression_ratio(" And so, my fellow Americans, ask not what your country can do for you."), 2.4f);
}

TEST(Quality, Judge) {
  // ok: everything within the thresholds (the bounds themselves pass: whisper uses > and <).
  EXPECT_EQ(judge(1.5f, -0.3f, 0.01f), Verdict::ok);
  EXPECT_EQ(judge(2.4f, -1.0f, 0.6f), Verdict::ok);
  // failed: repetition, or a low logprob.
  EXPECT_EQ(judge(2.5f, -0.3f, 0.01f), Verdict::failed);
  EXPECT_EQ(judge(1.5f, -1.2f, 0.01f), Verdict::failed);
  // A high no-speech probability alone is not silence (the decode is confident) ...
  EXPECT_EQ(judge(1.5f, -0.3f, 0.9f), Verdict::ok);
  // ... with a low logprob it is, and silence wins over the failed checks (not re-run).
  EXPECT_EQ(judge(1.5f, -1.2f, 0.9f), Verdict::silence);
  EXPECT_EQ(judge(3.0f, -1.2f, 0.9f), Verdict::silence);
  // Custom thresholds.
  const QualityThresholds strict{2.0f, -0.5f, 0.5f};
  EXPECT_EQ(judge(2.1f, -0.3f, 0.0f, strict), Verdict::failed);
  EXPECT_EQ(judge(1.0f, -0.6f, 0.55f, strict), Verdict::silence);
}

TEST(Quality, FallbackLadder) {
  EXPECT_EQ(fallback_after(0.0f), (std::vector<float>{0.2f, 0.4f, 0.6f, 0.8f, 1.0f}));
  EXPECT_EQ(fallback_after(0.2f), (std::vector<float>{0.4f, 0.6f, 0.8f, 1.0f}));
  EXPECT_EQ(fallback_after(0.3f), (std::vector<float>{0.4f, 0.6f, 0.8f, 1.0f}));
  EXPECT_EQ(fallback_after(0.8f), (std::vector<float>{1.0f}));
  EXPECT_TRUE(fallback_after(1.0f).empty());
  EXPECT_TRUE(fallback_after(1.5f).empty());
}

}  // namespace
}  // namespace prism::pipelines::transcribe

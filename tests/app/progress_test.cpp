// The progress line: counts, rates and ETA from given values (no clock).
#include "app/progress.h"

#include <gtest/gtest.h>

namespace prism::app {
namespace {

TEST(Progress, Counts) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1,000");
  EXPECT_EQ(format_count(1234567), "1,234,567");
  EXPECT_EQ(format_count(-45678), "-45,678");
}

TEST(Progress, Durations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(83), "1m 23s");
  EXPECT_EQ(format_duration(2 * 3600 + 5 * 60 + 9), "2h 05m");
}

TEST(Progress, LineWithRateAndEta) {
  ProgressSnapshot s;
  s.docs = 15000;  // 5,000 of them done by an earlier run
  s.start_docs = 5000;
  s.bytes_total = 1000000;
  s.start_bytes = 200000;
  s.bytes_done = 400000;  // 200 KB in this run...
  s.elapsed_s = 10;       // ...in 10 s: 600 KB left take 30 s
  EXPECT_EQ(format_progress(s, 0), "15,000 docs (40.0%), 1,000 docs/s, ETA 30s");
  EXPECT_EQ(format_progress(s, 10), "[####......]  40.0%  15,000 docs  1,000 docs/s  ETA 30s");
}

TEST(Progress, NothingDoneYetAndEmptyInput) {
  ProgressSnapshot s;
  s.bytes_total = 100;
  EXPECT_EQ(format_progress(s, 0), "0 docs (0.0%), - docs/s, ETA -");
  ProgressSnapshot empty;
  empty.elapsed_s = 1;
  EXPECT_EQ(format_progress(empty, 4), "[####]  100.0%  0 docs  - docs/s  ETA -");
}

}  // namespace
}  // namespace prism::app

// app/progress.h: the progress of a long command on stderr: documents done, docs/s and an ETA
// from the input bytes consumed out of the file's size. On a terminal one line redrawn in
// place (a bar); otherwise (a log file, a pipe) a plain line now and then.
// Must not: write to stdout (it carries results), or decide anything from time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace prism::app {

struct ProgressSnapshot {
  int64_t docs = 0;         // done in total, earlier runs of a resumed job included
  int64_t bytes_done = 0;   // of the input consumed
  int64_t bytes_total = 0;  // the input's size
  // Of this run, for the rates: what was done when it started, and the seconds since.
  int64_t start_docs = 0;
  int64_t start_bytes = 0;
  double elapsed_s = 0;
};

// "[#######.....]  45.2%  123,456 docs  4,567 docs/s  ETA 1m 23s" (bar_width > 0) or
// "123,456 docs (45.2%), 4,567 docs/s, ETA 1m 23s" (bar_width == 0). Rates and ETA read
// "-" until this run has done something.
std::string format_progress(const ProgressSnapshot& s, int bar_width);
std::string format_duration(double seconds);  // "45s", "1m 23s", "2h 05m"
std::string format_count(int64_t n);          // "1,234,567"

class ProgressReporter {
 public:
  // enabled == false: silent. Otherwise a bar when stderr is a terminal, plain lines if not.
  ProgressReporter(std::string label, int64_t bytes_total, int64_t start_docs, int64_t start_bytes, bool enabled);
  // Redraws at most every 0.2 s on a terminal, every 10 s otherwise.
  void update(int64_t docs, int64_t bytes_done);
  // The last state, always printed (ends the bar's line).
  void finish(int64_t docs, int64_t bytes_done);

 private:
  void print(int64_t docs, int64_t bytes_done, bool final);
  std::string label_;
  int64_t bytes_total_, start_docs_, start_bytes_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_print_;
};

}  // namespace prism::app

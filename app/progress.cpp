// app/progress.cpp: formatting is pure (tested); the reporter only decides when to print.
#include "app/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace prism::app {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kTtyIntervalS = 0.2;
constexpr double kPlainIntervalS = 10.0;

}  // namespace

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[48];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm %02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldh %02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  return buf;
}

std::string format_progress(const ProgressSnapshot& s, int bar_width) {
  const double fraction =
      s.bytes_total > 0 ? std::clamp(static_cast<double>(s.bytes_done) / static_cast<double>(s.bytes_total), 0.0, 1.0)
                        : 1.0;
  const int64_t run_docs = s.docs - s.start_docs;
  const int64_t run_bytes = s.bytes_done - s.start_bytes;
  std::string rate = "-", eta = "-";
  if (s.elapsed_s > 0 && run_docs > 0) rate = format_count(static_cast<int64_t>(std::llround(run_docs / s.elapsed_s)));
  if (s.elapsed_s > 0 && run_bytes > 0)
    eta = format_duration(s.elapsed_s * static_cast<double>(std::max<int64_t>(0, s.bytes_total - s.bytes_done)) /
                          static_cast<double>(run_bytes));
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * fraction);
  if (bar_width <= 0) return format_count(s.docs) + " docs (" + pct + "), " + rate + " docs/s, ETA " + eta;
  const int filled = static_cast<int>(fraction * bar_width);
  std::string line(1, '[');
  line.append(static_cast<size_t>(filled), '#').append(static_cast<size_t>(bar_width - filled), '.');
  line.append("]  ").append(pct).append("  ").append(format_count(s.docs)).append(" docs  ").append(rate);
  return line.append(" docs/s  ETA ").append(eta);
}

ProgressReporter::ProgressReporter(std::string label, int64_t bytes_total, int64_t start_docs, int64_t start_bytes,
                                   bool enabled)
    : label_(std::move(label)),
      bytes_total_(bytes_total),
      start_docs_(start_docs),
      start_bytes_(start_bytes),
      enabled_(enabled),
      tty_(enabled && ::isatty(STDERR_FILENO) == 1),
      start_(Clock::now()),
      last_print_(start_) {}

void ProgressReporter::update(int64_t docs, int64_t bytes_done) {
  if (!enabled_) return;
  const double since = std::chrono::duration<double>(Clock::now() - last_print_).count();
  if (since >= (tty_ ? kTtyIntervalS : kPlainIntervalS)) print(docs, bytes_done, false);
}

void ProgressReporter::finish(int64_t docs, int64_t bytes_done) {
  if (enabled_) print(docs, bytes_done, true);
}

void ProgressReporter::print(int64_t docs, int64_t bytes_done, bool final) {
  last_print_ = Clock::now();
  ProgressSnapshot s{docs,        bytes_done,   bytes_total_,
                     start_docs_, start_bytes_, std::chrono::duration<double>(last_print_ - start_).count()};
  if (tty_) {
    // \r + clear to the end of the line: the bar is redrawn in place.
    std::fprintf(stderr, "\r\033[K%s %s%s", label_.c_str(), format_progress(s, 30).c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s %s\n", label_.c_str(), format_progress(s, 0).c_str());
  }
  std::fflush(stderr);
}

}  // namespace prism::app

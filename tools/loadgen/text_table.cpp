// tools/loadgen/text_table.cpp: column alignment and compact numbers.
#include "tools/loadgen/text_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace prism::tools::loadgen {

std::string format_table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      if (c == 0) line += row[c] + pad;
      else line += "  " + pad + row[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) v = 0;  // no "-0"
  char buf[64];
  const double a = std::fabs(v);
  if (a >= 100 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string format_ms(double seconds) { return format_number(seconds * 1e3); }

}  // namespace prism::tools::loadgen

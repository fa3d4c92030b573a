// tools/loadgen/text_table.h: aligned columns for the terminal (summary and --compare) and
// number formatting shared by every report.
#pragma once

#include <string>
#include <vector>

namespace prism::tools::loadgen {

// Rows of cells; the first column is left-aligned, the others right-aligned; two spaces
// between columns; every line starts with `indent`.
std::string format_table(const std::vector<std::vector<std::string>>& rows, const std::string& indent = "  ");

// Integers and magnitudes of 100 or more rounded to an integer (123, 12345); smaller ones
// to three significant digits (12.3, 1.23, 0.0123). "-" for NaN.
std::string format_number(double v);

// Milliseconds from seconds, as format_number.
std::string format_ms(double seconds);

}  // namespace prism::tools::loadgen

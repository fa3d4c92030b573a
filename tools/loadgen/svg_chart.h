// tools/loadgen/svg_chart.h: line and bar charts as inline SVG text, for the self-contained
// HTML report (no script, no font or style from the network). Charts only draw what they are
// given: the report decides what to plot.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace prism::tools::loadgen {

struct ChartPoint {
  double x = 0, y = 0;
  std::string label;  // shown on hover (an SVG <title>)
};

struct LineSeries {
  std::string name;
  std::string color;  // CSS colour
  std::vector<ChartPoint> points;
  bool dashed = false;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<LineSeries> series;
  std::optional<double> marker_x;  // a vertical dashed line (the saturation point)
  std::string marker_label;
  int width = 640, height = 360;
};

struct BarGroup {
  std::string label;           // under the group
  std::vector<double> values;  // one per bar name
};

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> bar_names;  // legend, one per value of a group
  std::vector<std::string> colors;     // one per bar name
  std::vector<BarGroup> groups;
  int width = 640, height = 320;
};

std::string render_line_chart(const LineChart& chart);
std::string render_bar_chart(const BarChart& chart);

// Axis ticks from lo to at least hi at a step of 1, 2 or 5 times a power of ten, at most
// max_ticks + 1 of them; lo itself is the first tick when it is a multiple of the step.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);

// &, <, >, " and ' as entities: text and attribute values.
std::string xml_escape(std::string_view text);

}  // namespace prism::tools::loadgen

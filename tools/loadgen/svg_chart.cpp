// tools/loadgen/svg_chart.cpp: axes, ticks, polylines and bars in SVG.
#include "tools/loadgen/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tools/loadgen/text_table.h"

namespace prism::tools::loadgen {

namespace {

constexpr double kLeft = 64, kRight = 16, kTop = 40, kBottom = 52;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Maps data to pixels in the plot area.
struct Frame {
  double x0, x1, y0, y1;  // data ranges
  double w, h;            // svg size
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * (w - kLeft - kRight); }
  double py(double y) const { return h - kBottom - (y - y0) / (y1 - y0) * (h - kTop - kBottom); }
};

std::string open_svg(int width, int height, const std::string& title) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) +
         "\" role=\"img\" aria-label=\"" + xml_escape(title) + "\">\n<text class=\"title\" x=\"" + num(kLeft) +
         "\" y=\"20\">" + xml_escape(title) + "</text>\n";
}

std::string text(double x, double y, const std::string& s, const char* anchor, const char* cls = "tick",
                 const std::string& extra = "") {
  return "<text class=\"" + std::string(cls) + "\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor +
         "\"" + extra + ">" + xml_escape(s) + "</text>\n";
}

// Grid lines and tick labels of both axes, and the axis labels.
std::string axes(const Frame& f, const std::vector<double>& xt, const std::vector<double>& yt, const std::string& x_label,
                 const std::string& y_label) {
  std::string out;
  for (double y : yt) {
    out += "<line class=\"grid\" x1=\"" + num(kLeft) + "\" x2=\"" + num(f.w - kRight) + "\" y1=\"" + num(f.py(y)) +
           "\" y2=\"" + num(f.py(y)) + "\"/>\n";
    out += text(kLeft - 6, f.py(y) + 4, format_number(y), "end");
  }
  for (double x : xt) {
    out += "<line class=\"grid\" x1=\"" + num(f.px(x)) + "\" x2=\"" + num(f.px(x)) + "\" y1=\"" + num(kTop) + "\" y2=\"" +
           num(f.h - kBottom) + "\"/>\n";
    out += text(f.px(x), f.h - kBottom + 16, format_number(x), "middle");
  }
  out += "<line class=\"axis\" x1=\"" + num(kLeft) + "\" x2=\"" + num(f.w - kRight) + "\" y1=\"" + num(f.h - kBottom) +
         "\" y2=\"" + num(f.h - kBottom) + "\"/>\n";
  out += "<line class=\"axis\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" y2=\"" +
         num(f.h - kBottom) + "\"/>\n";
  if (!x_label.empty()) out += text((kLeft + f.w - kRight) / 2, f.h - 12, x_label, "middle", "label");
  if (!y_label.empty()) {
    const double cy = (kTop + f.h - kBottom) / 2;
    out += text(16, cy, y_label, "middle", "label", " transform=\"rotate(-90 16 " + num(cy) + ")\"");
  }
  return out;
}

std::string legend(const Frame& f, const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out;
  double x = f.w - kRight;
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    const double width = 18 + 7.0 * static_cast<double>(it->first.size());
    x -= width + 10;
    out += "<rect class=\"legend-key\" x=\"" + num(x) + "\" y=\"12\" width=\"12\" height=\"10\" fill=\"" +
           xml_escape(it->second) + "\"/>\n";
    out += text(x + 16, 21, it->first, "start", "legend");
  }
  return out;
}

std::string empty_chart(int width, int height, const std::string& title) {
  return open_svg(width, height, title) + text(width / 2.0, height / 2.0, "no data", "middle", "label") + "</svg>\n";
}

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!(hi > lo) || max_ticks < 1 || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  // Multiples of the step, not a running sum: no drift over many ticks.
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9);; k += 1) {
    const double t = k * step + 0.0;  // + 0.0: -0 becomes 0
    ticks.push_back(t);
    if (t >= hi * (1 - 1e-12)) break;
  }
  return ticks;
}

std::string render_line_chart(const LineChart& c) {
  double max_x = 0, max_y = 0;
  size_t num_points = 0;
  for (const LineSeries& s : c.series) {
    for (const ChartPoint& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      max_x = std::max(max_x, p.x);
      max_y = std::max(max_y, p.y);
      ++num_points;
    }
  }
  if (num_points == 0) return empty_chart(c.width, c.height, c.title);
  if (c.marker_x) max_x = std::max(max_x, *c.marker_x);
  // 4% headroom: a point at the maximum stays off the frame.
  const std::vector<double> xt = nice_ticks(0, max_x > 0 ? max_x * 1.04 : 1, 6);
  const std::vector<double> yt = nice_ticks(0, max_y > 0 ? max_y * 1.04 : 1, 5);
  const Frame f{0, xt.back(), 0, yt.back(), static_cast<double>(c.width), static_cast<double>(c.height)};
  std::string out = open_svg(c.width, c.height, c.title) + axes(f, xt, yt, c.x_label, c.y_label);
  if (c.marker_x) {
    out += "<line class=\"marker\" x1=\"" + num(f.px(*c.marker_x)) + "\" x2=\"" + num(f.px(*c.marker_x)) + "\" y1=\"" +
           num(kTop) + "\" y2=\"" + num(c.height - kBottom) + "\"/>\n";
    const bool right_half = f.px(*c.marker_x) > c.width / 2.0;  // keep the label inside the frame
    out += text(f.px(*c.marker_x) + (right_half ? -4 : 4), kTop + 12, c.marker_label, right_half ? "end" : "start",
                "marker-label");
  }
  std::vector<std::pair<std::string, std::string>> keys;
  for (const LineSeries& s : c.series) {
    std::string points;
    std::string dots;
    for (const ChartPoint& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      if (!points.empty()) points += ' ';
      points += num(f.px(p.x)) + "," + num(f.py(p.y));
      dots += "<circle cx=\"" + num(f.px(p.x)) + "\" cy=\"" + num(f.py(p.y)) + "\" r=\"4\" fill=\"" + xml_escape(s.color) +
              "\"><title>" + xml_escape(s.name + ": " + p.label) + "</title></circle>\n";
    }
    if (points.empty()) continue;
    out += "<polyline class=\"series\" fill=\"none\" stroke=\"" + xml_escape(s.color) + "\" stroke-width=\"2\"" +
           (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + points + "\"><title>" + xml_escape(s.name) +
           "</title></polyline>\n" + dots;
    keys.emplace_back(s.name, s.color);
  }
  return out + legend(f, keys) + "</svg>\n";
}

std::string render_bar_chart(const BarChart& c) {
  double max_y = 0;
  for (const BarGroup& g : c.groups)
    for (double v : g.values)
      if (std::isfinite(v)) max_y = std::max(max_y, v);
  if (c.groups.empty() || c.bar_names.empty()) return empty_chart(c.width, c.height, c.title);
  const std::vector<double> yt = nice_ticks(0, max_y > 0 ? max_y * 1.08 : 1, 5);  // room for value labels
  const Frame f{0, 1, 0, yt.back(), static_cast<double>(c.width), static_cast<double>(c.height)};
  std::string out = open_svg(c.width, c.height, c.title) + axes(f, {}, yt, "", c.y_label);
  const double plot_w = c.width - kLeft - kRight;
  const double group_w = plot_w / static_cast<double>(c.groups.size());
  const double bar_w = std::min(40.0, group_w * 0.8 / static_cast<double>(c.bar_names.size()));
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const BarGroup& group = c.groups[g];
    const double center = kLeft + group_w * (static_cast<double>(g) + 0.5);
    double x = center - bar_w * static_cast<double>(c.bar_names.size()) / 2;
    for (size_t b = 0; b < c.bar_names.size(); ++b, x += bar_w) {
      const double v = b < group.values.size() && std::isfinite(group.values[b]) ? group.values[b] : 0.0;
      const double top = f.py(v);
      const std::string color = b < c.colors.size() ? c.colors[b] : "#888";
      out += "<rect class=\"bar\" x=\"" + num(x + 1) + "\" y=\"" + num(top) + "\" width=\"" + num(bar_w - 2) +
             "\" height=\"" + num(c.height - kBottom - top) + "\" fill=\"" + xml_escape(color) + "\"><title>" +
             xml_escape(group.label + " " + c.bar_names[b] + ": " + format_number(v)) + "</title></rect>\n";
      out += text(x + bar_w / 2, top - 3, format_number(v), "middle", "value");
    }
    out += text(center, c.height - kBottom + 16, group.label, "middle");
  }
  std::vector<std::pair<std::string, std::string>> keys;
  for (size_t b = 0; b < c.bar_names.size(); ++b) keys.emplace_back(c.bar_names[b], b < c.colors.size() ? c.colors[b] : "#888");
  return out + legend(f, keys) + "</svg>\n";
}

}  // namespace prism::tools::loadgen

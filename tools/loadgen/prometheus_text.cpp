// tools/loadgen/prometheus_text.cpp: text exposition parsing and scrape deltas.
#include "tools/loadgen/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace prism::tools::loadgen {

namespace {

bool is_name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

std::optional<double> parse_value(std::string_view s) {
  if (s == "+Inf" || s == "Inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  return v;
}

// name{a="x",b="y\"z"} value [timestamp]
std::optional<MetricSample> parse_sample(std::string_view line) {
  MetricSample s;
  size_t i = 0;
  while (i < line.size() && is_name_char(line[i], i == 0)) ++i;
  if (i == 0) return std::nullopt;
  s.name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t k = i;
      while (i < line.size() && is_name_char(line[i], i == k)) ++i;
      if (i == k || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return std::nullopt;
      std::string key(line.substr(k, i - k)), value;
      for (i += 2; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
      }
      if (i >= line.size()) return std::nullopt;  // unterminated value
      ++i;
      s.labels.emplace_back(std::move(key), std::move(value));
    }
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  size_t j = i;
  while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
  std::optional<double> v = parse_value(line.substr(i, j - i));
  if (!v) return std::nullopt;
  s.value = *v;
  return s;  // a trailing timestamp is ignored
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The family a sample belongs to, and the part (_bucket, _sum, _count, _total or "").
std::pair<std::string, std::string> family_of(const MetricsSnapshot& m, const std::string& name) {
  if (m.types.contains(name)) return {name, ""};
  for (std::string_view suffix : {"_bucket", "_sum", "_count", "_total", "_created"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      std::string base = name.substr(0, name.size() - suffix.size());
      if (m.types.contains(base)) return {base, std::string(suffix)};
    }
  }
  return {name, ""};
}

std::string_view type_of(const MetricsSnapshot& m, const std::string& family) {
  auto it = m.types.find(family);
  return it == m.types.end() ? std::string_view("untyped") : std::string_view(it->second);
}

bool matches_model(const MetricLabels& labels, std::string_view model) {
  if (model.empty()) return true;
  for (const auto& [k, v] : labels)
    if ((k == "deployment" || k == "model_name" || k == "model") && v != model) return false;
  return true;
}

// Labels without `le`, written a="x",b="y": the identity of a series across scrapes.
std::string series_key(const MetricLabels& labels) {
  std::string key;
  for (const auto& [k, v] : labels) {
    if (k == "le") continue;
    key += (key.empty() ? "" : ",") + k + "=\"" + v + "\"";
  }
  return key;
}

std::optional<double> label_value(const MetricLabels& labels, std::string_view key) {
  for (const auto& [k, v] : labels)
    if (k == key) return parse_value(v);
  return std::nullopt;
}

// One scrape folded by family: counter/gauge values per series, histogram parts.
struct Folded {
  std::string type;
  std::map<std::string, double> series;  // counter, gauge, untyped: per series key
  double count = 0, sum = 0;
  std::map<double, double> buckets;      // le -> cumulative count, summed over series
};

std::map<std::string, Folded> fold(const MetricsSnapshot& m, std::string_view model) {
  std::map<std::string, Folded> out;
  for (const MetricSample& s : m.samples) {
    if (!matches_model(s.labels, model)) continue;
    auto [family, part] = family_of(m, s.name);
    if (part == "_created") continue;
    Folded& f = out[family];
    f.type = type_of(m, family);
    if (f.type == "histogram" || f.type == "summary") {
      if (part == "_count") f.count += s.value;
      else if (part == "_sum") f.sum += s.value;
      else if (part == "_bucket") {
        if (auto le = label_value(s.labels, "le")) f.buckets[*le] += s.value;
      }
      continue;  // summary quantile lines: not comparable across scrapes
    }
    f.series[series_key(s.labels)] += s.value;
  }
  return out;
}

}  // namespace

Result<MetricsSnapshot> parse_prometheus_text(std::string_view text) {
  MetricsSnapshot m;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    if (line.front() == '#') {
      if (line.starts_with("# TYPE ")) {
        std::string_view rest = trim(line.substr(7));
        const size_t sp = rest.find(' ');
        if (sp != std::string_view::npos) m.types[std::string(rest.substr(0, sp))] = std::string(trim(rest.substr(sp + 1)));
      }
      continue;  // HELP, EOF and other comments
    }
    std::optional<MetricSample> s = parse_sample(line);
    if (!s) {
      return invalid_argument("metrics line " + std::to_string(line_no) + " is not a Prometheus sample: '" +
                              std::string(line.substr(0, 120)) + "'");
    }
    m.samples.push_back(std::move(*s));
  }
  return m;
}

std::optional<double> histogram_quantile(double q, std::vector<std::pair<double, double>> buckets) {
  std::sort(buckets.begin(), buckets.end());
  if (buckets.empty()) return std::nullopt;
  const double total = buckets.back().second;
  if (!(total > 0)) return std::nullopt;
  const double rank = std::clamp(q, 0.0, 1.0) * total;
  double lower = 0, below = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto [le, cum] = buckets[i];
    if (cum >= rank && cum > below) {
      if (std::isinf(le)) return i > 0 ? buckets[i - 1].first : std::optional<double>();
      if (i == 0 && le <= 0) return le;
      return lower + (le - lower) * (rank - below) / (cum - below);
    }
    lower = le;
    below = cum;
  }
  return buckets.back().first;
}

std::vector<MetricDelta> diff_metrics(const MetricsSnapshot& before, const MetricsSnapshot& after,
                                      std::string_view model) {
  const std::map<std::string, Folded> b = fold(before, model), a = fold(after, model);
  std::vector<MetricDelta> out;
  for (const auto& [name, fa] : a) {
    auto it = b.find(name);
    const Folded empty;
    const Folded& fb = it == b.end() ? empty : it->second;
    MetricDelta d;
    d.name = name;
    d.type = fa.type == "summary" ? "histogram" : fa.type;
    if (d.type == "histogram") {
      d.count = fa.count - fb.count;
      d.sum = fa.sum - fb.sum;
      if (d.count < 0) d.count = fa.count, d.sum = fa.sum;  // the server restarted
      if (!(d.count > 0)) continue;
      std::vector<std::pair<double, double>> buckets;
      for (const auto& [le, cum] : fa.buckets) {
        auto bi = fb.buckets.find(le);
        buckets.emplace_back(le, cum - (bi == fb.buckets.end() || d.count == fa.count ? 0.0 : bi->second));
      }
      d.p50 = histogram_quantile(0.5, buckets);
      d.p99 = histogram_quantile(0.99, buckets);
    } else if (d.type == "gauge") {
      for (const auto& [k, v] : fb.series) d.before += v;
      for (const auto& [k, v] : fa.series) d.after += v;
    } else {  // counter or untyped: treated as a counter
      for (const auto& [key, v] : fa.series) {
        auto bi = fb.series.find(key);
        double dv = v - (bi == fb.series.end() ? 0.0 : bi->second);
        if (dv < 0) dv = v;  // reset
        d.delta += dv;
        if (dv != 0) d.series.emplace_back(key, dv);
      }
      if (d.delta == 0) continue;
      if (d.series.size() < 2) d.series.clear();
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace prism::tools::loadgen

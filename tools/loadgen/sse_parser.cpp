// tools/loadgen/sse_parser.cpp: incremental event-stream parsing.
#include "tools/loadgen/sse_parser.h"

namespace prism::tools::loadgen {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (last_was_cr_) {
      last_was_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF
    }
    if (c == '\r' || c == '\n') {
      last_was_cr_ = c == '\r';
      process_line(out);
      line_.clear();
      continue;
    }
    line_ += c;
  }
  return out;
}

void SseParser::process_line(std::vector<SseEvent>& out) {
  if (line_.empty()) {  // blank line: dispatch
    if (has_data_) out.push_back({std::move(event_), std::move(data_)});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_.front() == ':') return;  // comment (keep-alive pings)
  const size_t colon = line_.find(':');
  std::string_view field = std::string_view(line_).substr(0, colon);
  std::string_view value;
  if (colon != std::string::npos) {
    value = std::string_view(line_).substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  } else if (field == "event") {
    event_ = value;
  }
  // id and retry matter to reconnecting browsers, not to a benchmark: ignored.
}

}  // namespace prism::tools::loadgen

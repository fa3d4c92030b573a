// tools/loadgen/sse_parser.h: the client side of Server-Sent Events (WHATWG HTML, "server-sent
// events"): bytes as they arrive in, whole events out. It knows nothing of OpenAI's chunks or
// [DONE]; workloads read the data.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace prism::tools::loadgen {

struct SseEvent {
  std::string event;  // the "event:" name; empty for the default "message"
  std::string data;   // the "data:" lines joined with '\n'
};

class SseParser {
 public:
  // Feeds the next bytes of the stream (any split: mid-line, mid-CRLF) and returns the events
  // they complete, in order. NOTE: per the spec, lines end with CRLF, LF or CR; one space
  // after the colon is dropped; lines starting with ':' are comments; a blank line dispatches
  // the event, and an event with no data line is not dispatched.
  std::vector<SseEvent> feed(std::string_view bytes);

  // True when bytes of an unfinished event are pending (a stream that ends here was cut).
  bool has_partial_event() const { return !line_.empty() || has_data_ || !event_.empty(); }

 private:
  void process_line(std::vector<SseEvent>& out);

  std::string line_;           // the current line, without its end
  bool last_was_cr_ = false;   // a CR ended the last line: a following LF belongs to it
  std::string event_, data_;
  bool has_data_ = false;
};

}  // namespace prism::tools::loadgen

// api/sse.cpp: event formatting (text/event-stream, WHATWG HTML "server-sent events").
#include "api/sse.h"

namespace prism::api {

std::string sse_event(std::string_view data, std::string_view event) {
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  std::size_t i = 0;
  while (true) {
    std::size_t j = data.find('\n', i);
    out += "data: ";
    out += data.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i);
    out += '\n';
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  out += '\n';
  return out;
}

std::string_view sse_done() { return "data: [DONE]\n\n"; }

StreamWriter start_sse(Responder& responder) {
  return responder.start_stream("text/event-stream", 200,
                                {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
}

}  // namespace prism::api

// api/websocket.h: what a WebSocket route handler sees. The server upgrades the request
// (after auth), calls the handler once on the I/O thread, and from then on delivers each
// message to the callbacks the handler returned, in order, on that connection's I/O strand.
// The handler keeps the WebSocketConn to send from any thread. No Beast here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "api/http_types.h"

namespace prism::api {

namespace detail {
struct WebSocketState;  // defined in api/http_server.cpp
}

// Copyable, thread-safe handle to one WebSocket connection. Sends are queued on the
// connection's strand and written in order; they never block.
class WebSocketConn {
 public:
  WebSocketConn() = default;
  // False when the connection is closed or closing.
  bool send_text(std::string message);
  bool send_binary(std::string message);
  // Starts the close handshake (RFC 6455 code and reason). Idempotent.
  void close(uint16_t code = 1000, std::string reason = {});
  bool closed() const;
  const std::string& request_id() const;

 private:
  friend struct detail::WebSocketState;
  explicit WebSocketConn(std::shared_ptr<detail::WebSocketState> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::WebSocketState> s_;
};

struct WebSocketCallbacks {
  // One whole message (fragments joined), at most max_body_bytes. binary: an opcode-2 message.
  std::function<void(std::string_view message, bool binary)> on_message;
  // Once, when the connection ends for any reason (client close, error, shutdown, timeout).
  std::function<void()> on_close;
};

// Called once per upgraded connection on its I/O thread; returns the callbacks for it.
using WebSocketHandler = std::function<WebSocketCallbacks(const Request&, WebSocketConn)>;

}  // namespace prism::api

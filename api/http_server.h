// api/http_server.h: the HTTP/1.1 + WebSocket server (Boost.Beast over Asio, kept out of
// this header). It owns sockets, limits, timeouts, auth, routing, request ids, error
// responses and graceful shutdown; handlers own everything else.
//
// Threading: num_io_threads threads run one io_context; each connection is served on its
// own strand, so a connection's handlers, callbacks and writes never run concurrently.
// Route handlers run on the I/O threads (they must parse, validate and hand off; the
// expensive work runs in deployments); Responder, StreamWriter and WebSocketConn may be
// completed from any thread (they post onto the connection's strand).
//
// Limits: body > max_body_bytes -> 413 (a Content-Length over it is refused before any body
// byte is read; a chunked body when it crosses it); headers > max_header_bytes -> 431;
// a connection beyond max_connections gets a 503 and is closed; a request must be read in
// full within read_timeout_ms of its first byte (headers, then again for the body), and an
// idle keep-alive connection is closed after idle_timeout_ms; a handler that has not
// answered (or started a stream) after request_timeout_ms -> 504 and cancellation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/router.h"
#include "base/status.h"

namespace prism::api {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: an ephemeral port, see HttpServer::port()
  std::size_t max_body_bytes = 32u << 20;  // audio uploads: OpenAI allows 25 MB files
  std::size_t max_header_bytes = 16u << 10;
  int read_timeout_ms = 30'000;
  int idle_timeout_ms = 10'000;
  int request_timeout_ms = 600'000;
  int shutdown_grace_ms = 10'000;
  int max_connections = 1024;
  int num_io_threads = 2;
  std::vector<std::string> api_keys;                      // empty: no auth
  std::vector<std::string> open_paths = {"/health", "/ready"};  // need no key
  bool handle_signals = false;  // run() also stops on SIGINT/SIGTERM (asio signal_set)

  Status validate() const;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Router router);
  ~HttpServer();  // request_shutdown() and run() to completion
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the I/O threads. Errors: invalid options, address in use.
  Status start();
  // The bound port (the real one when options.port was 0); 0 before start().
  int port() const;
  // Starts if needed, then blocks until shutdown is requested and finished: stop accepting,
  // close idle connections, let in-flight requests finish (and then close their connection)
  // for up to shutdown_grace_ms, then close everything left and join the I/O threads.
  Status run();
  // Thread-safe and idempotent; returns at once. Not async-signal-safe: from a signal, use
  // options.handle_signals (asio's signal_set) instead of a raw signal handler.
  void request_shutdown();
  // Connections currently open (served, not the 503-refused ones).
  int num_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::api

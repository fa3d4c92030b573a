// api/http_types.h: what a route handler sees. A Request (parsed, body read in full), a
// Response to send once, and a Responder that completes the request later from any thread
// (deployments answer from their engine threads), either with one Response or as a stream
// (chunked transfer; SSE is a stream of formatted events, see api/sse.h).
// No Beast or Asio here: route files and app/ include this header and must compile fast.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prism::api {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;      // "GET", "POST", ... as sent
  std::string target;      // raw request target: path and query
  std::string path;        // target before '?', not percent-decoded
  std::string query;       // target after '?', without the '?'
  HeaderList headers;      // as received; look up with header()
  std::string body;        // the whole body (chunked bodies decoded), at most max_body_bytes
  HeaderList path_params;  // {name} segments of the matched route pattern
  std::string request_id;  // also sent back as the x-request-id header
  std::string remote;      // peer address "ip:port", for logs

  // The first header of that name (case-insensitive), or "" when absent.
  std::string_view header(std::string_view name) const;
  // The value of a {name} path parameter, or "" when the route has none of that name.
  std::string_view path_param(std::string_view name) const;
  // The value of a query parameter (not percent-decoded), or "" when absent.
  std::string_view query_param(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  HeaderList headers;  // extra headers (Allow, Retry-After, ...); x-request-id is added by the server
  std::string body;

  static Response json(int status, std::string body) { return {status, "application/json", {}, std::move(body)}; }
  static Response text(int status, std::string body) {
    return {status, "text/plain; charset=utf-8", {}, std::move(body)};
  }
};

namespace detail {
// Defined in api/http_server.cpp. A link is owned only by the user-facing handles: when
// the last Responder (StreamWriter) handle goes, an unanswered request gets a 500 (an
// unclosed stream is closed) instead of waiting for its deadline.
struct ResponderLink;
struct StreamLink;
}

// A chunked response body in progress. Copyable handle; every method is thread-safe and
// never blocks: chunks are queued on the connection's strand and written in order, one
// chunk per write, so each chunk (an SSE event) is flushed as it is written.
class StreamWriter {
 public:
  StreamWriter() = default;
  // Queues one chunk. False when the stream is closed or the client went away (then the
  // request is cancelled: stop producing). Empty chunks are skipped (one would end the body).
  bool write(std::string chunk);
  // Ends the body (the zero-length last chunk). Idempotent. When the last handle of a
  // writer is dropped without close(), the body is ended too: the client is never left hanging.
  void close();
  bool cancelled() const;

 private:
  friend class Responder;
  explicit StreamWriter(std::shared_ptr<detail::StreamLink> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::StreamLink> s_;
};

// Completes one request. Copyable handle; thread-safe. Exactly one of send() or
// start_stream() takes effect; later calls return false. If neither happens within the
// server's request_timeout_ms the client gets a 504 and the request is cancelled; when the
// last handle is dropped unanswered, the client gets a 500 at once.
class Responder {
 public:
  Responder() = default;
  bool send(Response response);
  // Starts a chunked response (status and headers now, body as StreamWriter::write calls).
  // The request deadline stops applying once the stream starts. An empty writer (whose
  // write() returns false) when the request is already answered or cancelled.
  StreamWriter start_stream(std::string content_type, int status = 200, HeaderList headers = {});
  // True once the client disconnected, the deadline passed or the server force-closed the
  // connection: the work for this request should stop.
  bool cancelled() const;
  // Runs fn once when the request is cancelled (at once, on this thread, if it already is).
  // fn runs on an I/O thread: it must be quick (set a flag, notify a queue). One callback;
  // a second call replaces the first.
  void on_cancel(std::function<void()> fn);
  const std::string& request_id() const;

 private:
  friend struct detail::ResponderLink;
  explicit Responder(std::shared_ptr<detail::ResponderLink> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::ResponderLink> s_;
};

// A route handler. Runs on an I/O thread: parse and validate at once, then hand the work to
// a deployment and return; answer through the Responder, now or later, from any thread.
// An exception escaping the handler becomes a 500 with a generic message (details logged).
using Handler = std::function<void(const Request&, Responder)>;

}  // namespace prism::api

// api/http_server.cpp: the only file that includes Beast and Asio. One HttpSession per TCP
// connection (HTTP/1.1 with keep-alive, chunked streams), one WsSession per upgraded one;
// both live on their own strand, so their members need no locks. Handles given to handlers
// (Responder, StreamWriter, WebSocketConn) reach a session only by posting onto its strand,
// and only while the server is alive (Lifeline), so a deployment thread that answers late,
// after a disconnect or after shutdown, touches nothing that is gone.
// Must not: run model work, block an I/O thread, or leak exception text to clients.
#include "api/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include <omp.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "api/auth.h"
#include "api/errors.h"
#include "base/log.h"

namespace prism::api {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// Set false (under mu) before the io_context stops: after that no handle posts to it.
struct Lifeline {
  std::mutex mu;
  bool alive = true;
};

// A client-supplied x-request-id is kept when it is short and plain; else a fresh one.
std::string make_request_id(std::string_view given) {
  if (!given.empty() && given.size() <= 128 &&
      std::all_of(given.begin(), given.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      }))
    return std::string(given);
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  char buf[24];
  std::snprintf(buf, sizeof(buf), "req_%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

bool is_beast_http_error(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Boost 1.74's beast::string_view is boost::string_view.
std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

class Connection;

}  // namespace

// ---- server-wide state shared by sessions -------------------------------------------------

struct ServerCore {
  HttpServerOptions options;
  Router router;
  ApiKeyAuth auth;
  std::shared_ptr<Lifeline> life = std::make_shared<Lifeline>();
  std::atomic<bool> draining{false};

  std::mutex mu;                    // guards connections
  std::condition_variable changed;  // a connection closed
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> connections;
  std::atomic<uint64_t> next_id{1};
  std::atomic<int> num_connections{0};

  // Declared last, destroyed first: pending handlers (which own sessions) are destroyed
  // while the registry above still exists.
  net::io_context ioc;

  ServerCore(HttpServerOptions o, Router r)
      : options(std::move(o)), router(std::move(r)), auth(options.api_keys, options.open_paths),
        ioc(std::max(1, options.num_io_threads)) {}

  Ms read_timeout() const { return Ms(options.read_timeout_ms); }
  Ms idle_timeout() const { return Ms(options.idle_timeout_ms); }

  uint64_t add(const std::shared_ptr<Connection>& c);
  void remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    if (connections.erase(id)) num_connections.fetch_sub(1);
    changed.notify_all();
  }
  std::vector<std::shared_ptr<Connection>> snapshot() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::shared_ptr<Connection>> out;
    for (auto& [id, w] : connections)
      if (auto c = w.lock()) out.push_back(std::move(c));
    return out;
  }
};

namespace {

// A served connection, as the shutdown sequence sees it.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;
  // Posts onto the connection's strand: graceful (close when idle, finish the request in
  // flight, then close) or forced (close now, cancelling the request).
  virtual void post_shutdown(bool force) = 0;
};

}  // namespace

uint64_t ServerCore::add(const std::shared_ptr<Connection>& c) {
  const uint64_t id = next_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu);
  connections.emplace(id, c);
  num_connections.fetch_add(1);
  return id;
}

namespace {
class HttpSession;
class WsSession;
}  // namespace

// ---- handles given to handlers -------------------------------------------------------------

namespace detail {

struct ResponderState {
  std::shared_ptr<Lifeline> life;
  std::weak_ptr<HttpSession> session;
  std::string request_id;
  std::atomic<bool> answered{false};       // send() or start_stream() or the server answered
  std::atomic<bool> cancelled{false};
  std::atomic<bool> stream_closed{false};
  std::mutex mu;                  // guards on_cancel
  std::function<void()> on_cancel;

  // Runs f(session) on the session's strand when the server and session are alive.
  template <class F>
  bool post(F&& f);

  void cancel() {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (cancelled.exchange(true)) return;
      fn = std::move(on_cancel);
    }
    if (fn) fn();
  }
};

struct ResponderLink {
  std::shared_ptr<ResponderState> state;
  explicit ResponderLink(std::shared_ptr<ResponderState> s) : state(std::move(s)) {}
  ~ResponderLink();
  static Responder make(std::shared_ptr<ResponderState> s) {
    return Responder(std::make_shared<ResponderLink>(std::move(s)));
  }
};

struct StreamLink {
  std::shared_ptr<ResponderState> state;
  explicit StreamLink(std::shared_ptr<ResponderState> s) : state(std::move(s)) {}
  ~StreamLink();
};

struct WebSocketState {
  std::shared_ptr<Lifeline> life;
  std::weak_ptr<WsSession> session;
  std::string request_id;
  std::atomic<bool> closed{false};

  template <class F>
  bool post(F&& f);
  static WebSocketConn make(std::shared_ptr<WebSocketState> s) { return WebSocketConn(std::move(s)); }
};

}  // namespace detail

namespace {

using detail::ResponderState;

// ---- one HTTP/1.1 connection ---------------------------------------------------------------

class HttpSession : public Connection {
 public:
  HttpSession(ServerCore* core, tcp::socket socket)
      : core_(core), stream_(std::move(socket)), request_timer_(stream_.get_executor()) {
    beast::error_code ec;
    const tcp::endpoint ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~HttpSession() override {
    if (id_) core_->remove(id_);
  }

  net::any_io_executor executor() { return stream_.get_executor(); }
  std::shared_ptr<HttpSession> self() { return std::static_pointer_cast<HttpSession>(shared_from_this()); }

  void start() {
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);  // SSE events must not wait for Nagle
    id_ = core_->add(shared_from_this());
    wait_request();
  }

  // Beyond max_connections: a 503 and close, without serving anything.
  void start_refusing() {
    keep_alive_ = false;
    ApiError e = not_ready("The server has too many open connections. Retry later.");
    write_response(error_response(e), make_request_id({}));
  }

  void post_shutdown(bool force) override {
    net::post(executor(), [s = self(), force] { s->on_shutdown(force); });
  }

  // ---- called on the strand through Responder / StreamWriter ----

  void on_response(ResponderState* st, Response r) {
    if (st != current_.get() || closed_) return;
    request_timer_.cancel();
    write_response(std::move(r), st->request_id);
  }

  void on_stream_start(ResponderState* st, std::string content_type, int status, HeaderList headers) {
    if (st != current_.get() || closed_) return;
    request_timer_.cancel();
    streaming_ = true;
    stream_res_.emplace(static_cast<http::status>(status), 11);
    stream_res_->set(http::field::server, "prism");
    stream_res_->set(http::field::content_type, content_type);
    stream_res_->set("x-request-id", st->request_id);
    for (auto& [k, v] : headers) stream_res_->insert(k, v);
    stream_res_->keep_alive(keep_alive_ && !core_->draining);
    stream_res_->chunked(true);
    stream_sr_.emplace(*stream_res_);
    writing_ = true;
    status_ = status;
    stream_.expires_after(core_->read_timeout());
    http::async_write_header(stream_, *stream_sr_, [s = self()](beast::error_code ec, std::size_t) {
      s->writing_ = false;
      s->header_sent_ = true;
      if (ec) return s->close();
      s->pump();
    });
  }

  void on_stream_chunk(ResponderState* st, std::string chunk) {
    if (st != current_.get() || closed_ || !streaming_) return;
    out_.push_back(std::move(chunk));
    pump();
  }

  void on_stream_end(ResponderState* st) {
    if (st != current_.get() || closed_ || !streaming_) return;
    end_requested_ = true;
    pump();
  }

 private:
  // ---- reading a request ----

  void wait_request() {
    if (closed_) return;
    if (core_->draining) return close();
    if (buffer_.size() > 0) return read_header();  // pipelined bytes already here
    stream_.expires_after(core_->idle_timeout());
    stream_.async_read_some(buffer_.prepare(4096), [s = self()](beast::error_code ec, std::size_t n) {
      s->buffer_.commit(n);
      if (ec) return s->close();  // idle timeout, or the client closed: nothing to answer
      s->read_header();
    });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(core_->options.max_header_bytes));
    parser_->body_limit(core_->options.max_body_bytes);
    stream_.expires_after(core_->read_timeout());
    http::async_read_header(stream_, buffer_, *parser_, [s = self()](beast::error_code ec, std::size_t) {
      if (ec) return s->on_read_error(ec);
      s->on_header();
    });
  }

  void on_header() {
    auto& req = parser_->get();
    upgrade_asked_ = websocket::is_upgrade(req);
    if (parser_->is_done()) return dispatch();
    if (iequals(sv(req[http::field::expect]), "100-continue")) {
      continue_res_.emplace(http::status::continue_, 11);
      stream_.expires_after(core_->read_timeout());
      http::async_write(stream_, *continue_res_, [s = self()](beast::error_code ec, std::size_t) {
        if (ec) return s->close();
        s->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(core_->read_timeout());  // the body gets its own read_timeout_ms
    http::async_read(stream_, buffer_, *parser_, [s = self()](beast::error_code ec, std::size_t) {
      if (ec) return s->on_read_error(ec);
      s->dispatch();
    });
  }

  void on_read_error(beast::error_code ec) {
    keep_alive_ = false;
    const auto& o = core_->options;
    if (ec == http::error::body_limit) return write_error(body_too_large(o.max_body_bytes));
    if (ec == http::error::header_limit) return write_error(headers_too_large(o.max_header_bytes));
    // end_of_stream / partial_message: the client went away. A timeout has closed the
    // socket already (tcp_stream does so). Neither can be answered.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec == beast::error::timeout || !is_beast_http_error(ec))
      return close();
    write_error(bad_request("Malformed HTTP request: " + ec.message() + ".", "malformed_request"));
  }

  // ---- handing the request to its route ----

  Request take_request(http::request<http::string_body>* raw) {
    http::request<http::string_body> msg = parser_->release();
    if (raw) *raw = msg;
    parser_.reset();
    Request r;
    r.method = std::string(sv(msg.method_string()));
    r.target = std::string(sv(msg.target()));
    const std::size_t q = r.target.find('?');
    r.path = r.target.substr(0, q);
    if (q != std::string::npos) r.query = r.target.substr(q + 1);
    for (const auto& f : msg) r.headers.emplace_back(std::string(sv(f.name_string())), std::string(sv(f.value())));
    r.body = std::move(msg.body());
    r.remote = remote_;
    r.request_id = make_request_id(r.header("x-request-id"));
    keep_alive_ = msg.keep_alive();
    return r;
  }

  void dispatch() {
    http::request<http::string_body> raw;
    Request req = take_request(upgrade_asked_ ? &raw : nullptr);
    method_ = req.method;
    path_ = req.path;
    started_ = Clock::now();
    if (auto e = core_->auth.check(req.path, req.header("authorization"))) return write_error(*e, req.request_id);
    Router::Match m = core_->router.match(req.method, req.path, upgrade_asked_);
    switch (m.kind) {
      case Router::Match::not_found: return write_error(route_not_found(req.method, req.path), req.request_id);
      case Router::Match::method_not_allowed:
        return write_error(method_not_allowed(req.method, req.path, m.allow), req.request_id);
      case Router::Match::upgrade_required: {
        ApiError e = bad_request("This endpoint is a WebSocket: send 'Upgrade: websocket'.", "upgrade_required");
        e.status = 426;
        return write_error(e, req.request_id);
      }
      case Router::Match::found: break;
    }
    req.path_params = std::move(m.params);
    if (m.ws_handler) return upgrade(std::move(raw), std::move(req), m.ws_handler);

    auto st = std::make_shared<ResponderState>();
    st->life = core_->life;
    st->session = self();
    st->request_id = req.request_id;
    current_ = st;
    watch_disconnect();
    request_timer_.expires_after(Ms(core_->options.request_timeout_ms));
    request_timer_.async_wait([s = self(), st](beast::error_code ec) {
      if (!ec) s->on_deadline(st.get());
    });
    try {
      (*m.handler)(req, detail::ResponderLink::make(st));
    } catch (const std::exception& e) {
      PRISM_LOG_ERROR("request {} {} {}: handler threw: {}", req.request_id, req.method, req.path, e.what());
      answer_internal(st.get());
    } catch (...) {
      PRISM_LOG_ERROR("request {} {} {}: handler threw a non-std exception", req.request_id, req.method, req.path);
      answer_internal(st.get());
    }
  }

  void answer_internal(ResponderState* st) {
    if (st->answered.exchange(true)) return;  // it answered before throwing: that stands
    on_response(st, error_response(server_error()));
  }

  void on_deadline(ResponderState* st) {
    if (st != current_.get() || st->answered.exchange(true)) return;
    PRISM_LOG_WARN("request {} {} {}: no answer within {} ms", st->request_id, method_, path_,
                   core_->options.request_timeout_ms);
    st->cancel();
    write_response(error_response(request_timeout()), st->request_id);
  }

  // NOTE: while a handler works, a read stays pending so that a client that goes away is
  // seen at once (the request is cancelled). Bytes it reads (a pipelined next request)
  // stay in buffer_ for the next parse; past max_header_bytes we stop reading.
  void watch_disconnect() {
    if (watching_ || buffer_.size() >= core_->options.max_header_bytes) return;
    watching_ = true;
    stream_.expires_never();  // applies to this read only: no write is pending now
    stream_.async_read_some(buffer_.prepare(1024), [s = self()](beast::error_code ec, std::size_t n) {
      s->watching_ = false;
      s->buffer_.commit(n);
      if (s->lingering_) return ec && ec != net::error::operation_aborted ? s->close() : s->linger_read();
      if (s->resume_after_watch_) {
        s->resume_after_watch_ = false;
        if (ec && ec != net::error::operation_aborted) return s->close();
        return s->wait_request();
      }
      if (ec) {
        if (s->current_) {
          PRISM_LOG_DEBUG("request {}: client disconnected", s->current_->request_id);
        }
        return s->close();  // cancels the request in flight
      }
      if (s->current_) s->watch_disconnect();
    });
  }

  // ---- writing ----

  void write_error(const ApiError& e, std::string request_id = {}) {
    if (request_id.empty()) request_id = make_request_id({});
    if (e.status >= 500) PRISM_LOG_ERROR("request {}: {} {}", request_id, e.status, e.message);
    write_response(error_response(e), request_id);
  }

  void write_response(Response r, const std::string& request_id) {
    if (closed_) return;
    status_ = r.status;
    res_.emplace(static_cast<http::status>(r.status), 11);
    res_->set(http::field::server, "prism");
    res_->set(http::field::content_type, r.content_type);
    res_->set("x-request-id", request_id);
    for (auto& [k, v] : r.headers) res_->insert(k, v);
    res_->body() = std::move(r.body);
    res_->keep_alive(keep_alive_ && !core_->draining);
    res_->prepare_payload();
    writing_ = true;
    stream_.expires_after(core_->read_timeout());
    http::async_write(stream_, *res_, [s = self()](beast::error_code ec, std::size_t) {
      s->writing_ = false;
      if (ec) return s->close();
      s->finish_request();
    });
  }

  // Writes queued chunks one at a time, then the last chunk once close() was asked.
  void pump() {
    if (writing_ || !header_sent_ || closed_) return;
    if (!out_.empty()) {
      chunk_ = std::move(out_.front());
      out_.pop_front();
      writing_ = true;
      stream_.expires_after(core_->read_timeout());
      net::async_write(stream_, http::make_chunk(net::buffer(chunk_)), [s = self()](beast::error_code ec, std::size_t) {
        s->writing_ = false;
        if (ec) return s->close();
        s->pump();
      });
    } else if (end_requested_) {
      writing_ = true;
      stream_.expires_after(core_->read_timeout());
      net::async_write(stream_, http::make_chunk_last(), [s = self()](beast::error_code ec, std::size_t) {
        s->writing_ = false;
        if (ec) return s->close();
        s->finish_request();
      });
    }
  }

  void finish_request() {
    if (current_ || !method_.empty()) {
      PRISM_LOG_DEBUG("{} {} -> {} in {} us ({})", method_, path_, status_,
                      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count(),
                      current_ ? current_->request_id : "");
    }
    current_.reset();
    request_timer_.cancel();
    streaming_ = header_sent_ = end_requested_ = false;
    stream_sr_.reset();
    stream_res_.reset();
    res_.reset();
    out_.clear();
    method_.clear();
    if (!keep_alive_ || core_->draining) return linger_close();
    if (watching_) {
      resume_after_watch_ = true;  // the watch read ends, then the next request is read
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    wait_request();
  }

  // NOTE: closing a socket with unread input makes the kernel send RST, which can destroy
  // the response we just wrote before the client reads it (a 413 to a client still sending
  // its body). So: stop sending, read and discard for a short while, then close.
  void linger_close() {
    if (closed_) return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    lingering_ = true;
    discard_budget_ = 4u << 20;
    if (watching_) {  // its completion continues with linger_read()
      stream_.socket().cancel(ec);
      return;
    }
    linger_read();
  }

  void linger_read() {
    if (closed_) return;
    stream_.expires_after(std::min(core_->read_timeout(), Ms(2000)));
    stream_.async_read_some(net::buffer(discard_), [s = self()](beast::error_code ec, std::size_t n) {
      if (ec || n >= s->discard_budget_) return s->close();
      s->discard_budget_ -= n;
      s->linger_read();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (current_) current_->cancel();
    current_.reset();
    request_timer_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    if (id_) {
      core_->remove(id_);
      id_ = 0;
    }
  }

  void on_shutdown(bool force) {
    if (closed_) return;
    if (force) return close();
    keep_alive_ = false;  // the request in flight (if any) is answered, then we close
    if (!current_ && !writing_) close();  // idle, or a request not yet read in full
  }

  void upgrade(http::request<http::string_body> raw, Request req, const WebSocketHandler* handler);

  ServerCore* core_;  // not owned; outlives every session
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string remote_;
  uint64_t id_ = 0;  // registry id; 0 when not registered
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::empty_body>> continue_res_;
  std::optional<http::response<http::string_body>> res_;
  std::optional<http::response<http::empty_body>> stream_res_;
  std::optional<http::response_serializer<http::empty_body>> stream_sr_;
  std::deque<std::string> out_;  // stream chunks not yet written
  std::string chunk_;            // the chunk being written
  std::shared_ptr<ResponderState> current_;  // the request in flight
  net::steady_timer request_timer_;
  std::string method_, path_;  // of the request in flight, for logs
  Clock::time_point started_;
  int status_ = 0;
  char discard_[4096];
  std::size_t discard_budget_ = 0;
  bool keep_alive_ = true;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  bool writing_ = false;
  bool streaming_ = false;
  bool header_sent_ = false;
  bool end_requested_ = false;
  bool lingering_ = false;
  bool upgrade_asked_ = false;
  bool closed_ = false;  // also after an upgrade: the socket then belongs to a WsSession
};

// ---- one WebSocket connection --------------------------------------------------------------

class WsSession : public Connection {
 public:
  WsSession(ServerCore* core, beast::tcp_stream stream, std::string request_id)
      : core_(core), ws_(std::move(stream)) {
    state_ = std::make_shared<detail::WebSocketState>();
    state_->life = core->life;
    state_->request_id = std::move(request_id);
  }
  ~WsSession() override {
    if (id_) core_->remove(id_);
  }

  net::any_io_executor executor() { return ws_.get_executor(); }
  std::shared_ptr<WsSession> self() { return std::static_pointer_cast<WsSession>(shared_from_this()); }

  void start(http::request<http::string_body> req, Request request, const WebSocketHandler* handler) {
    id_ = core_->add(shared_from_this());
    state_->session = self();
    handler_ = handler;
    request_ = std::move(request);
    upgrade_req_ = std::move(req);
    websocket::stream_base::timeout t{};
    t.handshake_timeout = core_->read_timeout();
    // Idle: a ping at half the time; a live client answers it, so only dead peers time out.
    t.idle_timeout = std::max(core_->idle_timeout(), Ms(2000));
    t.keep_alive_pings = true;
    ws_.set_option(t);
    ws_.read_message_max(core_->options.max_body_bytes);
    ws_.set_option(websocket::stream_base::decorator([id = state_->request_id](websocket::response_type& res) {
      res.set(http::field::server, "prism");
      res.set("x-request-id", id);
    }));
    ws_.async_accept(upgrade_req_, [s = self()](beast::error_code ec) {
      if (ec) return s->finish();
      s->on_open();
    });
  }

  void post_shutdown(bool force) override {
    net::post(executor(), [s = self(), force] {
      if (force) return s->finish();
      s->on_close_request(websocket::close_code::going_away, "server shutting down");
    });
  }

  void on_send(std::string message, bool binary) {
    if (closing_ || finished_) return;
    out_.emplace_back(std::move(message), binary);
    pump();
  }

  void on_close_request(uint16_t code, std::string reason) {
    if (closing_ || finished_) return;
    closing_ = true;
    close_reason_ = websocket::close_reason(static_cast<websocket::close_code>(code), reason);
    // Before the handshake's completion has run, the stream is not open (a close frame
    // written now would be framed wrongly): on_open() starts the close then.
    if (opened_) pump();
  }

 private:
  void on_open() {
    opened_ = true;
    if (closing_) return pump();  // shutdown came during the handshake
    try {
      callbacks_ = (*handler_)(request_, detail::WebSocketState::make(state_));
    } catch (const std::exception& e) {
      PRISM_LOG_ERROR("websocket {} {}: handler threw: {}", state_->request_id, request_.path, e.what());
      return on_close_request(websocket::close_code::internal_error, "internal error");
    }
    read();
  }

  void read() {
    ws_.async_read(buffer_, [s = self()](beast::error_code ec, std::size_t) {
      if (ec) return s->finish();  // closed by the peer (beast answered the close), or an error
      std::string msg = beast::buffers_to_string(s->buffer_.data());
      s->buffer_.consume(s->buffer_.size());
      if (s->callbacks_.on_message && !s->finished_) {
        try {
          s->callbacks_.on_message(msg, !s->ws_.got_text());
        } catch (const std::exception& e) {
          PRISM_LOG_ERROR("websocket {}: on_message threw: {}", s->state_->request_id, e.what());
          s->on_close_request(websocket::close_code::internal_error, "internal error");
        }
      }
      if (!s->finished_) s->read();
    });
  }

  void pump() {
    if (writing_ || finished_) return;
    if (!out_.empty()) {
      writing_ = true;
      message_ = std::move(out_.front().first);  // out_ may be cleared while this is written
      ws_.text(!out_.front().second);
      out_.pop_front();
      ws_.async_write(net::buffer(message_), [s = self()](beast::error_code ec, std::size_t) {
        s->writing_ = false;
        if (ec) return s->finish();
        s->pump();
      });
    } else if (closing_ && !close_sent_) {
      close_sent_ = true;
      writing_ = true;
      ws_.async_close(close_reason_, [s = self()](beast::error_code) {
        s->writing_ = false;
        s->finish();
      });
    }
  }

  // Once: the connection is over. Tells the handler, closes the socket.
  void finish() {
    if (finished_) return;
    finished_ = true;
    state_->closed = true;
    out_.clear();
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().close(ec);
    if (id_) {
      core_->remove(id_);
      id_ = 0;
    }
    if (callbacks_.on_close) {
      try {
        callbacks_.on_close();
      } catch (const std::exception& e) {
        PRISM_LOG_ERROR("websocket {}: on_close threw: {}", state_->request_id, e.what());
      }
    }
    callbacks_ = {};  // drop what the handler captured (often a WebSocketConn: a cycle otherwise)
  }

  ServerCore* core_;  // not owned
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  uint64_t id_ = 0;
  std::shared_ptr<detail::WebSocketState> state_;
  const WebSocketHandler* handler_ = nullptr;  // in the router, which outlives sessions
  http::request<http::string_body> upgrade_req_;
  Request request_;
  WebSocketCallbacks callbacks_;
  std::deque<std::pair<std::string, bool>> out_;  // (message, binary) not yet written
  std::string message_;                            // the message being written
  websocket::close_reason close_reason_;
  bool writing_ = false;
  bool closing_ = false;
  bool close_sent_ = false;
  bool opened_ = false;  // the handshake completed
  bool finished_ = false;
};

// The request asked for a WebSocket and its route is one: hand the socket to a WsSession
// (which answers the handshake) and end this session without closing the socket.
void HttpSession::upgrade(http::request<http::string_body> raw, Request req, const WebSocketHandler* handler) {
  stream_.expires_never();  // the websocket stream sets its own timeouts
  auto ws = std::make_shared<WsSession>(core_, std::move(stream_), req.request_id);
  closed_ = true;
  if (id_) {
    core_->remove(id_);
    id_ = 0;
  }
  ws->start(std::move(raw), std::move(req), handler);
}

// ---- accepting connections -------------------------------------------------------------

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(ServerCore* core, tcp::acceptor acceptor)
      : core_(core), acceptor_(std::move(acceptor)), retry_timer_(acceptor_.get_executor()) {}

  void accept() {
    acceptor_.async_accept(net::make_strand(core_->ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      self->on_accept(ec, std::move(socket));
    });
  }

  void stop() {
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      self->stopped_ = true;
      beast::error_code ec;
      self->acceptor_.close(ec);
      self->retry_timer_.cancel();
    });
  }

 private:
  void on_accept(beast::error_code ec, tcp::socket socket) {
    if (stopped_ || ec == net::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors and the like: wait a little rather than spin.
      PRISM_LOG_WARN("accept failed: {}", ec.message());
      retry_timer_.expires_after(Ms(50));
      retry_timer_.async_wait([self = shared_from_this()](beast::error_code e) {
        if (!e && !self->stopped_) self->accept();
      });
      return;
    }
    auto session = std::make_shared<HttpSession>(core_, std::move(socket));
    if (core_->num_connections.load() >= core_->options.max_connections) {
      net::post(session->executor(), [session] { session->start_refusing(); });
    } else {
      net::post(session->executor(), [session] { session->start(); });
    }
    accept();
  }

  ServerCore* core_;  // not owned
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
  bool stopped_ = false;  // acceptor strand only
};

}  // namespace

// ---- handles -------------------------------------------------------------------------------

namespace detail {

template <class F>
bool ResponderState::post(F&& f) {
  std::lock_guard<std::mutex> lock(life->mu);
  if (!life->alive) return false;
  std::shared_ptr<HttpSession> s = session.lock();
  if (!s) return false;
  net::post(s->executor(), [s, f = std::forward<F>(f)]() mutable { f(*s); });
  return true;
}

template <class F>
bool WebSocketState::post(F&& f) {
  std::lock_guard<std::mutex> lock(life->mu);
  if (!life->alive) return false;
  std::shared_ptr<WsSession> s = session.lock();
  if (!s) return false;
  net::post(s->executor(), [s, f = std::forward<F>(f)]() mutable { f(*s); });
  return true;
}

ResponderLink::~ResponderLink() {
  // Unwinding out of a throwing handler: dispatch() catches and answers the 500 itself.
  if (std::uncaught_exceptions() > 0) return;
  if (state->answered.exchange(true)) return;
  if (!state->cancelled) PRISM_LOG_ERROR("request {}: handler dropped the request without answering", state->request_id);
  state->post([st = state](HttpSession& s) { s.on_response(st.get(), error_response(server_error())); });
}

StreamLink::~StreamLink() {
  if (state->stream_closed.exchange(true)) return;
  state->post([st = state](HttpSession& s) { s.on_stream_end(st.get()); });
}

}  // namespace detail

bool Responder::send(Response response) {
  if (!s_) return false;
  const auto& st = s_->state;
  if (st->answered.exchange(true)) return false;
  return st->post([st, r = std::move(response)](HttpSession& s) mutable { s.on_response(st.get(), std::move(r)); });
}

StreamWriter Responder::start_stream(std::string content_type, int status, HeaderList headers) {
  if (!s_) return StreamWriter();
  const auto& st = s_->state;
  if (st->answered.exchange(true)) return StreamWriter();
  const bool posted = st->post([st, ct = std::move(content_type), status, h = std::move(headers)](HttpSession& s) mutable {
    s.on_stream_start(st.get(), std::move(ct), status, std::move(h));
  });
  if (!posted) return StreamWriter();
  return StreamWriter(std::make_shared<detail::StreamLink>(st));
}

bool Responder::cancelled() const { return s_ && s_->state->cancelled; }

void Responder::on_cancel(std::function<void()> fn) {
  if (!s_ || !fn) return;
  detail::ResponderState& st = *s_->state;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (!st.cancelled) {
      st.on_cancel = std::move(fn);
      return;
    }
  }
  fn();
}

const std::string& Responder::request_id() const {
  static const std::string kNone;
  return s_ ? s_->state->request_id : kNone;
}

bool StreamWriter::write(std::string chunk) {
  if (!s_) return false;
  const auto& st = s_->state;
  if (st->cancelled || st->stream_closed) return false;
  if (chunk.empty()) return true;
  return st->post([st, c = std::move(chunk)](HttpSession& s) mutable { s.on_stream_chunk(st.get(), std::move(c)); });
}

void StreamWriter::close() {
  if (!s_) return;
  const auto& st = s_->state;
  if (st->stream_closed.exchange(true)) return;
  st->post([st](HttpSession& s) { s.on_stream_end(st.get()); });
}

bool StreamWriter::cancelled() const { return !s_ || s_->state->cancelled; }

bool WebSocketConn::send_text(std::string message) {
  if (!s_ || s_->closed) return false;
  return s_->post([m = std::move(message)](WsSession& s) mutable { s.on_send(std::move(m), false); });
}

bool WebSocketConn::send_binary(std::string message) {
  if (!s_ || s_->closed) return false;
  return s_->post([m = std::move(message)](WsSession& s) mutable { s.on_send(std::move(m), true); });
}

void WebSocketConn::close(uint16_t code, std::string reason) {
  if (!s_ || s_->closed) return;
  s_->post([code, r = std::move(reason)](WsSession& s) mutable { s.on_close_request(code, std::move(r)); });
}

bool WebSocketConn::closed() const { return !s_ || s_->closed; }

const std::string& WebSocketConn::request_id() const {
  static const std::string kNone;
  return s_ ? s_->request_id : kNone;
}

// ---- Request -------------------------------------------------------------------------------

std::string_view Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

std::string_view Request::path_param(std::string_view name) const {
  for (const auto& [k, v] : path_params)
    if (k == name) return v;
  return {};
}

std::string_view Request::query_param(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    const std::size_t amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    const std::size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name) return eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return {};
}

// ---- HttpServer ----------------------------------------------------------------------------

Status HttpServerOptions::validate() const {
  if (port < 0 || port > 65535) return invalid_argument("server port must be in [0, 65535], got " + std::to_string(port));
  if (max_body_bytes == 0) return invalid_argument("server max_body_bytes must be > 0");
  if (max_header_bytes < 1024) return invalid_argument("server max_header_bytes must be >= 1024");
  if (read_timeout_ms <= 0 || idle_timeout_ms <= 0 || request_timeout_ms <= 0 || shutdown_grace_ms < 0)
    return invalid_argument("server timeouts must be > 0 (shutdown_grace_ms >= 0)");
  if (max_connections <= 0) return invalid_argument("server max_connections must be > 0");
  if (num_io_threads <= 0 || num_io_threads > 64) return invalid_argument("server num_io_threads must be in [1, 64]");
  return Status();
}

struct HttpServer::Impl {
  ServerCore core;
  std::shared_ptr<Listener> listener;
  std::optional<net::signal_set> signals;
  std::vector<std::thread> threads;
  std::atomic<int> port{0};

  std::mutex mu;  // guards the flags below
  std::condition_variable cv;
  bool started = false;
  bool shutdown_requested = false;
  bool finished = false;

  Impl(HttpServerOptions o, Router r) : core(std::move(o), std::move(r)) {}

  Status start();
  Status run();
  void request_shutdown() {
    std::lock_guard<std::mutex> lock(mu);
    shutdown_requested = true;
    cv.notify_all();
  }
  bool wait_connections_gone(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(core.mu);
    return core.changed.wait_until(lock, deadline, [&] { return core.connections.empty(); });
  }
};

Status HttpServer::Impl::start() {
  PRISM_RETURN_IF_ERROR(core.options.validate());
  std::lock_guard<std::mutex> lock(mu);
  if (started) return failed_precondition("the HTTP server is already started");
  const auto& o = core.options;
  beast::error_code ec;
  tcp::endpoint endpoint;
  const net::ip::address address = net::ip::make_address(o.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(o.port));
  } else {
    tcp::resolver resolver(core.ioc);
    auto results = resolver.resolve(o.host, std::to_string(o.port), ec);
    if (ec || results.empty()) return invalid_argument("cannot resolve server host '" + o.host + "': " + ec.message());
    endpoint = results.begin()->endpoint();
  }
  tcp::acceptor acceptor(net::make_strand(core.ioc));
  const std::string where = o.host + ":" + std::to_string(o.port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec) return unavailable("cannot listen on " + where + ": " + ec.message());
  acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return unavailable("cannot listen on " + where + ": " + ec.message());
  port = acceptor.local_endpoint().port();
  listener = std::make_shared<Listener>(&core, std::move(acceptor));
  listener->accept();
  if (o.handle_signals) {
    signals.emplace(core.ioc, SIGINT, SIGTERM);
    signals->async_wait([this](beast::error_code e, int sig) {
      if (e) return;
      PRISM_LOG_INFO("signal {}: shutting down", sig);
      request_shutdown();
    });
  }
  // NOTE: handlers parse, template, tokenize and preprocess here; any OpenMP region they reach
  // (log-mel of a realtime chunk, a tokenizer batch) stays on the I/O thread: a team of its
  // own per I/O thread would spin beside the compute pool and oversubscribe the cores.
  for (int i = 0; i < o.num_io_threads; ++i)
    threads.emplace_back([this] {
      omp_set_num_threads(1);
      core.ioc.run();
    });
  started = true;
  PRISM_LOG_INFO("listening on http://{}:{} ({} I/O threads)", endpoint.address().to_string(), port.load(),
                 o.num_io_threads);
  return Status();
}

Status HttpServer::Impl::run() {
  {
    std::unique_lock<std::mutex> lock(mu);
    if (finished) return Status();
    if (!started) {
      lock.unlock();
      PRISM_RETURN_IF_ERROR(start());
      lock.lock();
    }
    cv.wait(lock, [&] { return shutdown_requested; });
  }
  // Stop accepting, then let each connection finish what it is doing.
  core.draining = true;
  listener->stop();
  if (signals) net::post(core.ioc, [this] { signals->cancel(); });
  for (auto& c : core.snapshot()) c->post_shutdown(false);
  const auto deadline = Clock::now() + Ms(core.options.shutdown_grace_ms);
  if (!wait_connections_gone(deadline)) {
    PRISM_LOG_WARN("shutdown: {} connections still busy after {} ms; closing them", core.num_connections.load(),
                   core.options.shutdown_grace_ms);
    for (auto& c : core.snapshot()) c->post_shutdown(true);
    wait_connections_gone(Clock::now() + Ms(1000));
  }
  {
    std::lock_guard<std::mutex> lock(core.life->mu);
    core.life->alive = false;
  }
  core.ioc.stop();
  for (std::thread& t : threads) t.join();
  threads.clear();
  std::lock_guard<std::mutex> lock(mu);
  finished = true;
  PRISM_LOG_INFO("HTTP server stopped");
  return Status();
}

HttpServer::HttpServer(HttpServerOptions options, Router router)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(router))) {}

HttpServer::~HttpServer() {
  bool started;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    started = impl_->started;
  }
  if (started) {
    request_shutdown();
    (void)impl_->run();
  }
}

Status HttpServer::start() { return impl_->start(); }
int HttpServer::port() const { return impl_->port.load(); }
Status HttpServer::run() { return impl_->run(); }
void HttpServer::request_shutdown() { impl_->request_shutdown(); }
int HttpServer::num_connections() const { return impl_->core.num_connections.load(); }

}  // namespace prism::api

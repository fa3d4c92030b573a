// tools/loadgen/http_client.cpp: Beast coroutines for one request at a time per connection.
#include "tools/loadgen/http_client.h"

#include <algorithm>
#include <array>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tools/loadgen/sse_parser.h"

namespace prism::tools::loadgen {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr uint64_t kMaxBodyBytes = uint64_t{1} << 30;
constexpr size_t kBodyHeadBytes = 512;

std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

// A failed operation's kind: the deadline, a parse error, or a broken connection.
HttpOutcome failure(const error_code& ec, std::string_view broken_kind, int status = 0) {
  HttpOutcome o;
  o.status = status;
  const bool http_error = ec.category() == http::make_error_code(http::error::bad_version).category();
  if (ec == beast::error::timeout) o.error_kind = "timeout";
  else if (ec == http::error::end_of_stream || ec == http::error::partial_message) o.error_kind = broken_kind;
  else if (http_error) o.error_kind = "malformed";  // the bytes are not HTTP the parser accepts
  else o.error_kind = broken_kind;
  o.error_detail = ec.message();
  return o;
}

// A reused connection the server closed while it was idle fails like this on first use.
bool is_stale_connection(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == net::error::connection_aborted;
}

}  // namespace

Result<HttpEndpoint> parse_http_url(std::string_view url) {
  auto bad = [&](const std::string& why) { return invalid_argument("--url '" + std::string(url) + "': " + why); };
  if (url.starts_with("https://")) return bad("https is not supported: point --url at the server's plain http address");
  if (!url.starts_with("http://")) return bad("must start with http://");
  std::string_view rest = url.substr(7);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) return bad("user:password@ is not supported (use --api-key)");
  HttpEndpoint e;
  if (authority.starts_with("[")) {  // [::1]:8080
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed [ in the host");
    e.host = authority.substr(1, close - 1);
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority.front() != ':') return bad("junk after the IPv6 address");
    if (!authority.empty()) e.port = authority.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    e.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) e.port = authority.substr(colon + 1);
  }
  if (e.host.empty()) return bad("no host");
  if (e.port.empty() || e.port.size() > 5 || !std::all_of(e.port.begin(), e.port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(e.port) < 1 || std::stoi(e.port) > 65535)
    return bad("the port must be a number in [1, 65535]");
  if (path.find_first_of("?#") != std::string_view::npos) return bad("no query or fragment");
  while (path.ends_with("/")) path.remove_suffix(1);
  if (path.ends_with("/v1")) path.remove_suffix(3);
  e.base_path = path;
  const bool v6 = e.host.find(':') != std::string::npos;
  e.host_header = (v6 ? "[" + e.host + "]" : e.host) + (e.port == "80" ? "" : ":" + e.port);
  return e;
}

Result<ResolvedEndpoint> resolve(const HttpEndpoint& endpoint, std::string api_key) {
  net::io_context io;
  net::ip::tcp::resolver resolver(io);
  error_code ec;
  auto addresses = resolver.resolve(endpoint.host, endpoint.port, ec);
  if (ec) return unavailable("cannot resolve " + endpoint.host + ": " + ec.message());
  return ResolvedEndpoint{endpoint, std::move(addresses), std::move(api_key)};
}

struct HttpConnection::State {
  State(net::any_io_executor ex, const ResolvedEndpoint& e) : endpoint(e), stream(ex) {}
  const ResolvedEndpoint& endpoint;  // not owned; outlives the run's connections
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  bool open = false;
};

HttpConnection::HttpConnection(net::any_io_executor executor, const ResolvedEndpoint& endpoint)
    : s_(std::make_unique<State>(std::move(executor), endpoint)) {}

HttpConnection::~HttpConnection() {
  error_code ec;
  s_->stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
}

net::awaitable<HttpOutcome> HttpConnection::exchange(const BenchRequest& request, ResponseMeter& meter,
                                                     Clock::time_point due, Clock::time_point deadline) {
  State& s = *s_;
  const auto tok = [](error_code& ec) { return net::redirect_error(net::use_awaitable, ec); };
  http::request<http::string_body> req{http::string_to_verb(request.method), s.endpoint.endpoint.base_path + request.path,
                                       11};
  req.set(http::field::host, s.endpoint.endpoint.host_header);
  req.set(http::field::user_agent, "prism-bench");
  req.set(http::field::accept, request.streaming ? "text/event-stream" : "application/json");
  if (!s.endpoint.api_key.empty()) req.set(http::field::authorization, "Bearer " + s.endpoint.api_key);
  if (!request.body.empty() || request.method == "POST") {
    req.set(http::field::content_type, request.content_type);
    req.body() = request.body;
  }
  req.prepare_payload();
  req.keep_alive(true);

  std::optional<http::response_parser<http::buffer_body>> parser;
  error_code ec;
  for (int attempt = 0;; ++attempt) {
    const bool reused = s.open;
    s.stream.expires_at(deadline);
    if (!s.open) {
      s.buffer.clear();
      co_await s.stream.async_connect(s.endpoint.addresses, tok(ec));
      if (ec) {
        s.stream.close();
        co_return failure(ec, "connect");
      }
      s.open = true;
    }
    co_await http::async_write(s.stream, req, tok(ec));
    if (!ec) {
      parser.emplace();  // fresh: a failed attempt may have fed the last one
      parser->body_limit(kMaxBodyBytes);
      co_await http::async_read_header(s.stream, s.buffer, *parser, tok(ec));
    }
    if (!ec) break;
    s.stream.close();
    s.open = false;
    if (!(reused && attempt == 0 && is_stale_connection(ec))) co_return failure(ec, "disconnect");
  }

  http::response_parser<http::buffer_body>& p = *parser;
  const int status = static_cast<int>(p.get().result_int());
  const bool success = status >= 200 && status < 300;
  const bool event_stream = sv(p.get()[http::field::content_type]).starts_with("text/event-stream");
  SseParser sse;
  std::string body;
  std::array<char, 16384> chunk;
  while (!p.is_done()) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    co_await http::async_read_some(s.stream, s.buffer, p, tok(ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      s.stream.close();
      s.open = false;
      co_return failure(ec, "disconnect", status);
    }
    const std::string_view got(chunk.data(), chunk.size() - p.get().body().size);
    if (got.empty()) continue;
    if (success && event_stream) {
      const double t_s = std::chrono::duration<double>(Clock::now() - due).count();
      for (const SseEvent& e : sse.feed(got)) meter.on_event(e.data, t_s);
    } else if (success) {
      body.append(got);
    } else if (body.size() < kBodyHeadBytes) {
      body.append(got.substr(0, kBodyHeadBytes - body.size()));
    }
  }
  if (!p.keep_alive()) {
    s.stream.close();
    s.open = false;
  }
  HttpOutcome o;
  o.status = status;
  if (!success) o.body_head = std::move(body);
  else if (!event_stream) meter.on_body(body);
  co_return o;
}

namespace {

// Keeps a whole body for fetch_text.
class BodyCollector final : public ResponseMeter {
 public:
  void on_body(std::string_view body) override { body_ = body; }
  void on_event(std::string_view data, double) override { body_ += data; }
  Measurement finish(double) override { return {}; }
  std::string body_;
};

}  // namespace

net::awaitable<Result<HttpText>> fetch_text_async(net::any_io_executor executor, const ResolvedEndpoint& endpoint,
                                                   std::string method, std::string path, double timeout_s) {
  HttpConnection conn(executor, endpoint);
  BenchRequest request;
  request.method = method;
  request.path = path;
  BodyCollector collector;
  const Clock::time_point now = Clock::now();
  const auto deadline = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  HttpOutcome outcome = co_await conn.exchange(request, collector, now, deadline);
  if (!outcome.ok()) {
    const std::string url = "http://" + endpoint.endpoint.host_header + endpoint.endpoint.base_path + path;
    co_return unavailable(method + " " + url + " failed: " + outcome.error_kind + " (" + outcome.error_detail + ")");
  }
  HttpText text;
  text.status = outcome.status;
  text.body = outcome.status >= 200 && outcome.status < 300 ? std::move(collector.body_) : std::move(outcome.body_head);
  co_return text;
}

Result<HttpText> fetch_text(const ResolvedEndpoint& endpoint, std::string_view method, std::string_view path,
                            double timeout_s) {
  net::io_context io;
  std::optional<Result<HttpText>> result;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        result = co_await fetch_text_async(io.get_executor(), endpoint, std::string(method), std::string(path), timeout_s);
      },
      net::detached);
  io.run();
  if (!result) return internal_error("fetch_text: the request did not complete");
  return std::move(*result);
}

}  // namespace prism::tools::loadgen

// tools/loadgen/http_client.h: the load generator's HTTP/1.1 client (Boost.Beast over Asio, on
// the one io_context a run drives). One HttpConnection is one keep-alive TCP connection used
// for one request at a time; it feeds the answer to a ResponseMeter as it arrives (events of
// a stream as they are read, so first-token times are real) and never throws: every failure
// is an HttpOutcome with a kind. Plain http only (benchmarks run on loopback or a trusted
// network). It must not know any workload or statistic.
#pragma once

#include <utility>  // before asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/status.h"
#include "tools/loadgen/workload.h"

namespace prism::tools::loadgen {

using Clock = std::chrono::steady_clock;

// Where requests go: http://HOST[:PORT][/PREFIX].
struct HttpEndpoint {
  std::string host;         // as written, without brackets for IPv6
  std::string port = "80";
  std::string base_path;    // prepended to every request path; "" or "/prefix" (no trailing /)
  std::string host_header;  // host[:port] as the Host header wants it
};

// invalid_argument for anything but an http:// URL with a host (https:// is refused with the
// reason). A trailing "/v1" is dropped: OpenAI clients take base URLs that end in /v1, and the
// workloads' paths already start with it.
Result<HttpEndpoint> parse_http_url(std::string_view url);

// Resolved once before a run: connecting must not wait on DNS.
struct ResolvedEndpoint {
  HttpEndpoint endpoint;
  boost::asio::ip::tcp::resolver::results_type addresses;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when non-empty
};
Result<ResolvedEndpoint> resolve(const HttpEndpoint& endpoint, std::string api_key);

// How one exchange ended. error_kind is empty when an answer was read in full (whatever its
// status): "connect" (no connection), "timeout" (the deadline passed), "disconnect" (the
// connection broke mid-answer), "malformed" (not HTTP the parser accepts).
struct HttpOutcome {
  int status = 0;           // 0 when no status line was read
  std::string error_kind;
  std::string error_detail;
  std::string body_head;    // the first 512 bytes of a body that is not 2xx
  bool ok() const { return error_kind.empty(); }
};

class HttpConnection {
 public:
  HttpConnection(boost::asio::any_io_executor executor, const ResolvedEndpoint& endpoint);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends `request` and reads the answer by `deadline`. A 2xx body goes to `meter`
  // (on_event per event of a text/event-stream answer, with seconds since `due`; else
  // on_body once). A kept-alive connection the server had closed is reopened and the request
  // sent again, once, when no answer byte was read.
  boost::asio::awaitable<HttpOutcome> exchange(const BenchRequest& request, ResponseMeter& meter,
                                               Clock::time_point due, Clock::time_point deadline);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// One request on a connection of its own (scraping /metrics, listing models): the status and
// the whole body (the first 512 bytes when not 2xx), or the outcome's error as a Status
// (unavailable) naming the URL.
struct HttpText {
  int status = 0;
  std::string body;
};
// Inside a running io_context (a scrape in the middle of a run).
boost::asio::awaitable<Result<HttpText>> fetch_text_async(boost::asio::any_io_executor executor,
                                                          const ResolvedEndpoint& endpoint, std::string method,
                                                          std::string path, double timeout_s);
// Outside a run: runs its own io_context.
Result<HttpText> fetch_text(const ResolvedEndpoint& endpoint, std::string_view method, std::string_view path,
                            double timeout_s);

}  // namespace prism::tools::loadgen

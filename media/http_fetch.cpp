// http_get: a Boost.Beast client for one GET. Beast's stream timeouts apply to asynchronous
// operations only, so the steps run as async operations on a private io_context that the
// calling thread runs to completion: synchronous for the caller, one deadline for all steps.
// Name resolution is the one blocking step outside the deadline (getaddrinfo cannot be
// cancelled); it is bounded by the system resolver's own timeouts.
#include "media/http_fetch.h"

// Set by CMake when OpenSSL is found and linked; without it https URLs are refused.
#ifndef PRISM_HAVE_OPENSSL
#define PRISM_HAVE_OPENSSL 0
#endif

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/http/vector_body.hpp>
#include <boost/beast/version.hpp>

#if PRISM_HAVE_OPENSSL
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cctype>
#include <charconv>

namespace prism::media {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lowercase(s.substr(0, prefix.size())) == prefix;
}

Status bad_url(std::string_view why) { return invalid_argument("is not a valid http(s) URL (" + std::string(why) + ")"); }

// The request, the response parser and the first failure, shared by the steps.
struct Exchange {
  http::request<http::empty_body> request;
  beast::flat_buffer buffer;
  http::response_parser<http::vector_body<uint8_t>> parser;
  beast::error_code error;
  std::string step;  // what failed: "connect", "TLS handshake", "send", "receive"

  void fail(const char* what, beast::error_code ec) {
    if (!error) error = ec, step = what;
  }
};

Status describe_failure(const Exchange& ex, const HttpUrl& url, const HttpFetchOptions& options) {
  const std::string where = url.authority();
  if (ex.error == beast::error::timeout)
    return unavailable("could not be downloaded: no complete answer from " + where + " within " +
                       std::to_string(options.timeout_ms) + " ms");
  if (ex.error == http::error::body_limit)
    return invalid_argument("is larger than the limit of " + std::to_string(options.max_bytes) + " bytes");
  return unavailable("could not be downloaded (" + ex.step + " to " + where + " failed: " + ex.error.message() + ")");
}

Result<HttpResponse> finish(Exchange& ex) {
  HttpResponse out;
  auto& response = ex.parser.get();
  out.status = int(response.result_int());
  out.content_type = std::string(response[http::field::content_type]);
  out.location = std::string(response[http::field::location]);
  out.body = std::move(response.body());
  return out;
}

void prepare(Exchange& ex, const HttpUrl& url, const HttpFetchOptions& options) {
  ex.request = http::request<http::empty_body>(http::verb::get, url.target, 11);
  ex.request.set(http::field::host, url.authority());
  ex.request.set(http::field::user_agent, "prism");
  ex.request.set(http::field::accept, "*/*");
  ex.request.set(http::field::connection, "close");
  ex.parser.body_limit(uint64_t(std::max<int64_t>(options.max_bytes, 0)));
  ex.parser.header_limit(64 * 1024);
}

// send, then receive the head, then the body, on any stream (plain TCP or TLS).
// NOTE: the head is read on its own so that a Content-Length past the limit is refused
// before any body byte: Beast 1.74's whole-message read skips the parser's body_limit check
// of Content-Length (its eager loop continues past the error); chunked and read-to-close
// bodies are still counted against body_limit while they arrive.
template <class Stream>
void exchange(Stream& stream, Exchange& ex, int64_t max_bytes) {
  http::async_write(stream, ex.request, [&stream, &ex, max_bytes](beast::error_code ec, size_t) {
    if (ec) return ex.fail("send", ec);
    http::async_read_header(stream, ex.buffer, ex.parser, [&stream, &ex, max_bytes](beast::error_code ec, size_t) {
      if (ec) return ex.fail("receive", ec);
      if (auto length = ex.parser.content_length(); length && *length > uint64_t(std::max<int64_t>(max_bytes, 0)))
        return ex.fail("receive", http::error::body_limit);
      http::async_read(stream, ex.buffer, ex.parser, [&ex](beast::error_code ec, size_t) {
        if (ec) ex.fail("receive", ec);
      });
    });
  });
}

Result<tcp::resolver::results_type> resolve(net::io_context& ioc, const HttpUrl& url) {
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec) return unavailable("could not be downloaded (cannot resolve host '" + url.host + "': " + ec.message() + ")");
  return endpoints;
}

Result<HttpResponse> get_plain(const HttpUrl& url, const HttpFetchOptions& options) {
  net::io_context ioc;
  PRISM_ASSIGN_OR_RETURN(auto endpoints, resolve(ioc, url));
  beast::tcp_stream stream(ioc);
  Exchange ex;
  prepare(ex, url, options);
  stream.expires_after(std::chrono::milliseconds(options.timeout_ms));
  stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) return ex.fail("connect", ec);
    exchange(stream, ex, options.max_bytes);
  });
  ioc.run();
  if (ex.error) return describe_failure(ex, url, options);
  return finish(ex);
}

#if PRISM_HAVE_OPENSSL
Result<HttpResponse> get_tls(const HttpUrl& url, const HttpFetchOptions& options) {
  net::ssl::context ctx(net::ssl::context::tls_client);
  beast::error_code ec;
  if (options.ca_file.empty()) ctx.set_default_verify_paths(ec);
  else ctx.load_verify_file(options.ca_file, ec);
  if (ec) return internal_error("cannot load trusted certificates: " + ec.message());
  ctx.set_verify_mode(net::ssl::verify_peer);

  net::io_context ioc;
  PRISM_ASSIGN_OR_RETURN(auto endpoints, resolve(ioc, url));
  beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
  // SNI, and the certificate must name the host.
  if (!SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str()))
    return internal_error("cannot set the TLS server name");
  stream.set_verify_callback(net::ssl::host_name_verification(url.host));
  Exchange ex;
  prepare(ex, url, options);
  beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(options.timeout_ms));
  beast::get_lowest_layer(stream).async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) return ex.fail("connect", ec);
    stream.async_handshake(net::ssl::stream_base::client, [&](beast::error_code ec) {
      if (ec) return ex.fail("TLS handshake", ec);
      exchange(stream, ex, options.max_bytes);
    });
  });
  ioc.run();
  if (ex.error) return describe_failure(ex, url, options);
  return finish(ex);
}
#endif

}  // namespace

std::string HttpUrl::authority() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  std::string out = ipv6 ? "[" + host + "]" : host;
  if (port != (https ? 443 : 80)) out += ":" + std::to_string(port);
  return out;
}

Result<HttpUrl> parse_http_url(std::string_view url) {
  HttpUrl out;
  if (istarts_with(url, "http://")) {
    url.remove_prefix(7);
  } else if (istarts_with(url, "https://")) {
    out.https = true;
    url.remove_prefix(8);
  } else {
    return bad_url("the scheme must be http or https");
  }
  if (size_t hash = url.find('#'); hash != std::string_view::npos) url = url.substr(0, hash);
  const size_t end = url.find_first_of("/?");
  std::string_view authority = url.substr(0, end);
  out.target = end == std::string_view::npos ? "/" : std::string(url.substr(end));
  if (out.target[0] == '?') out.target = "/" + out.target;
  if (authority.find('@') != std::string_view::npos) return bad_url("credentials in URLs are not supported");
  std::string_view port_text;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad_url("an unterminated IPv6 address");
    out.host = lowercase(authority.substr(1, close - 1));
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return bad_url("text after the IPv6 address");
      port_text = rest.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = lowercase(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) return bad_url("no host");
  for (char c : out.host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' || c == ':'))
      return bad_url("the host has a character that is not allowed");
  out.port = out.https ? 443 : 80;
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
      return bad_url("a bad port");
    out.port = uint16_t(port);
  }
  for (char c : out.target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return bad_url("a space or control character in the path");
  return out;
}

Result<HttpUrl> resolve_redirect(const HttpUrl& base, std::string_view location) {
  if (istarts_with(location, "http://") || istarts_with(location, "https://")) return parse_http_url(location);
  const std::string scheme = base.https ? "https:" : "http:";
  if (location.substr(0, 2) == "//") return parse_http_url(scheme + std::string(location));
  const std::string origin = scheme + "//" + base.authority();
  if (!location.empty() && location[0] == '/') return parse_http_url(origin + std::string(location));
  std::string path = base.target.substr(0, base.target.find('?'));
  path = path.substr(0, path.rfind('/') + 1);
  return parse_http_url(origin + path + std::string(location));
}

bool https_fetch_supported() { return PRISM_HAVE_OPENSSL; }

Result<HttpResponse> http_get(const HttpUrl& url, const HttpFetchOptions& options) {
  if (!url.https) return get_plain(url, options);
#if PRISM_HAVE_OPENSSL
  return get_tls(url, options);
#else
  return invalid_argument(
      "is an https URL: https fetching is not built in (this build has no OpenSSL); use http, a data URL or a "
      "local file");
#endif
}

}  // namespace prism::media

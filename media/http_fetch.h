// media/http_fetch.h: one GET of a remote media URL (Boost.Beast over plain TCP, or TLS when
// built with OpenSSL), for read_media_url. It checks no policy: the caller decides whether a
// host may be fetched (and re-decides on every redirect, which is returned, not followed).
// Synchronous for the caller: the request runs on a private io_context in the calling
// thread, under one deadline for connect + TLS + send + receive.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::media {

struct HttpUrl {
  bool https = false;
  std::string host;    // lowercase; an IPv6 literal without its brackets
  uint16_t port = 0;   // 80 / 443 when the URL names none
  std::string target;  // path and query, at least "/"; the fragment dropped
  std::string authority() const;  // host[:port] as the Host header writes it
};

// invalid_argument ("is not a valid http(s) URL (...)") for anything else, including URLs
// with credentials (user:pass@host), which media URLs never need.
Result<HttpUrl> parse_http_url(std::string_view url);

// The URL a redirect's Location names, resolved against the URL that answered.
Result<HttpUrl> resolve_redirect(const HttpUrl& base, std::string_view location);

struct HttpFetchOptions {
  int timeout_ms = 10000;
  int64_t max_bytes = 64ll << 20;  // a larger body: invalid_argument "is larger than ..."
  std::string ca_file;             // PEM certificates to trust instead of the system's (tests)
};

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string location;  // redirects
  std::vector<uint8_t> body;
};

// Whether this build fetches https (Boost.Asio SSL with OpenSSL).
bool https_fetch_supported();

// One GET. Errors: unavailable (cannot resolve or connect, TLS or certificate failure, no
// answer before the deadline, a broken response), invalid_argument (body past max_bytes,
// https without TLS support); any HTTP status comes back as a response.
Result<HttpResponse> http_get(const HttpUrl& url, const HttpFetchOptions& options);

}  // namespace prism::media

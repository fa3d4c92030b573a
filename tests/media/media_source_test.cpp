// read_media_url: data URLs, local files only under the allowed directory (symlink and ".."
// escapes refused), remote URLs only for allowlisted hosts, fetched from a loopback server
// started here (plain HTTP; HTTPS too when the build has OpenSSL), with the byte limit, the
// deadline, redirects and HTTP errors.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "base/file.h"
#include "media/host_allowlist.h"
#include "media/http_fetch.h"
#include "media/image.h"
#include "media/media_source.h"
#include "test_util/paths.h"

#ifndef PRISM_HAVE_OPENSSL
#define PRISM_HAVE_OPENSSL 0
#endif
#if PRISM_HAVE_OPENSSL
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif

namespace prism::media {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

std::string base64(const Bytes& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(bytes[i]) << 16) | (i + 1 < bytes.size() ? uint32_t(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? bytes[i + 2] : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

Bytes sample_png() {
  Image image;
  image.width = 7;
  image.height = 5;
  image.pixels.resize(7 * 5 * 3);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t(i * 7);
  return encode_png(image);
}

Result<MediaBytes> read(const std::string& url, const MediaSourcePolicy& policy = {}) {
  return read_media_url(url, policy);
}

// The error's message, checking its code.
std::string failure(const Result<MediaBytes>& r, StatusCode code) {
  EXPECT_FALSE(r.has_value());
  if (r.has_value()) return "";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  return r.status().message();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- data URLs -----------------------------------------------------------------------------

TEST(MediaSource, DataUrls) {
  const Bytes png = sample_png();
  const std::string b64 = base64(png);
  auto r = read("data:image/png;base64," + b64);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->bytes, png);
  EXPECT_EQ(r->mime_type, "image/png");

  r = read("data:;base64," + b64);  // no MIME type
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bytes, png);
  EXPECT_EQ(r->mime_type, "");

  std::string wrapped;  // line-wrapped base64, as some clients send it
  for (size_t i = 0; i < b64.size(); i += 60) wrapped += b64.substr(i, 60) + "\r\n ";
  r = read("  DATA:Image/PNG;charset=x;base64," + wrapped);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->bytes, png);
  EXPECT_EQ(r->mime_type, "image/png");

  std::string url_safe = b64;  // the URL-safe alphabet, unpadded
  for (char& c : url_safe) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!url_safe.empty() && url_safe.back() == '=') url_safe.pop_back();
  r = read("data:image/png;base64," + url_safe);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bytes, png);

  r = read("data:text/plain,hello%20world");  // percent-encoded, not base64
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::string(r->bytes.begin(), r->bytes.end()), "hello world");
}

TEST(MediaSource, BadDataUrlsSayWhatIsWrong) {
  EXPECT_TRUE(contains(failure(read("data:image/png;base64"), StatusCode::invalid_argument), "without the ','"));
  EXPECT_TRUE(contains(failure(read("data:image/png;base64,iVBO*w0K"), StatusCode::invalid_argument),
                       "'*' at offset 4"));
  EXPECT_TRUE(contains(failure(read("data:image/png;base64,iVBORw0KG"), StatusCode::invalid_argument),
                       "truncated base64"));
  EXPECT_TRUE(contains(failure(read("data:image/png;base64,iV==BORw"), StatusCode::invalid_argument),
                       "'=' before the end"));
  EXPECT_TRUE(contains(failure(read("data:image/png;base64,  "), StatusCode::invalid_argument), "no data"));
  EXPECT_TRUE(contains(failure(read("data:text/plain,bad%zz"), StatusCode::invalid_argument), "%-escape"));
  MediaSourcePolicy small;
  small.max_bytes = 100;
  EXPECT_TRUE(contains(failure(read("data:image/png;base64," + base64(Bytes(200, 1)), small), StatusCode::invalid_argument),
                       "larger than the limit of 100 bytes"));
  EXPECT_TRUE(contains(failure(read("ftp://example.com/a.png"), StatusCode::invalid_argument), "'ftp:'"));
  EXPECT_TRUE(contains(failure(read("cat.png"), StatusCode::invalid_argument), "is not a URL"));
  EXPECT_TRUE(contains(failure(read(""), StatusCode::invalid_argument), "empty"));
}

// ---- local files ---------------------------------------------------------------------------

struct LocalTree {
  std::string root, allowed, outside_file, inside_file;
  LocalTree() {
    root = test::scratch_dir("media_source_files");
    allowed = root + "/allowed";
    fs::create_directories(allowed + "/sub dir");
    outside_file = root + "/secret.png";
    inside_file = allowed + "/sub dir/cat.png";
    const Bytes png = sample_png();
    EXPECT_TRUE(write_file(inside_file, std::string(png.begin(), png.end())).ok());
    EXPECT_TRUE(write_file(outside_file, "secret").ok());
    fs::create_symlink(outside_file, allowed + "/link.png");        // escapes
    fs::create_symlink(inside_file, allowed + "/good_link.png");    // stays inside
    fs::create_directory_symlink(root, allowed + "/up");            // a directory escape
  }
  MediaSourcePolicy policy() const {
    MediaSourcePolicy p;
    p.allowed_local_dir = allowed;
    return p;
  }
};

TEST(MediaSource, LocalFilesInsideTheAllowedDirectory) {
  const LocalTree tree;
  const Bytes png = sample_png();
  for (const std::string& url : {tree.inside_file, "file://" + tree.inside_file,
                                 "file://localhost" + tree.allowed + "/sub%20dir/cat.png",
                                 tree.allowed + "/good_link.png", tree.allowed + "/sub dir/../sub dir/cat.png"}) {
    SCOPED_TRACE(url);
    auto r = read(url, tree.policy());
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    EXPECT_EQ(r->bytes, png);
  }
}

TEST(MediaSource, LocalFilesOutsideAreRefused) {
  const LocalTree tree;
  EXPECT_TRUE(contains(failure(read(tree.inside_file), StatusCode::failed_precondition), "allowed_local_media_dir"));
  const MediaSourcePolicy policy = tree.policy();
  EXPECT_TRUE(contains(failure(read(tree.outside_file, policy), StatusCode::failed_precondition), "outside the allowed"));
  EXPECT_TRUE(contains(failure(read(tree.allowed + "/../secret.png", policy), StatusCode::failed_precondition),
                       "outside the allowed"));
  EXPECT_TRUE(contains(failure(read(tree.allowed + "/link.png", policy), StatusCode::failed_precondition),
                       "after resolving links"));
  EXPECT_TRUE(contains(failure(read("file://" + tree.allowed + "/up/secret.png", policy), StatusCode::failed_precondition),
                       "after resolving links"));
  EXPECT_TRUE(contains(failure(read("/etc/passwd", policy), StatusCode::failed_precondition), "outside"));
  failure(read(tree.allowed + "/missing.png", policy), StatusCode::not_found);
  EXPECT_TRUE(contains(failure(read(tree.allowed + "/sub dir", policy), StatusCode::invalid_argument), "regular file"));
  EXPECT_TRUE(contains(failure(read("file://server/share/a.png", policy), StatusCode::invalid_argument), "another host"));
  MediaSourcePolicy small = policy;
  small.max_bytes = 10;
  EXPECT_TRUE(contains(failure(read(tree.inside_file, small), StatusCode::invalid_argument), "larger than the limit"));
}

// ---- remote --------------------------------------------------------------------------------

TEST(MediaSource, HostAllowlist) {
  const std::vector<std::string> allowed = {"images.example.com", "*.cdn.example.org", "127.0.0.1"};
  EXPECT_TRUE(host_on_allowlist("images.example.com", allowed));
  EXPECT_TRUE(host_on_allowlist("IMAGES.Example.COM.", allowed));
  EXPECT_TRUE(host_on_allowlist("a.cdn.example.org", allowed));
  EXPECT_TRUE(host_on_allowlist("b.a.cdn.example.org", allowed));
  EXPECT_TRUE(host_on_allowlist("127.0.0.1", allowed));
  EXPECT_FALSE(host_on_allowlist("cdn.example.org", allowed));  // the wildcard's apex
  EXPECT_FALSE(host_on_allowlist("evilcdn.example.org", allowed));
  EXPECT_FALSE(host_on_allowlist("images.example.com.evil.net", allowed));
  EXPECT_FALSE(host_on_allowlist("127.0.0.2", allowed));
  EXPECT_FALSE(host_on_allowlist("anything", {}));
}

TEST(MediaSource, RemoteRefusedWithoutTheAllowlist) {
  EXPECT_TRUE(contains(failure(read("http://images.example.com/a.png"), StatusCode::failed_precondition),
                       "allowed_media_hosts"));
  MediaSourcePolicy policy;
  policy.allowed_hosts = {"images.example.com"};
  EXPECT_TRUE(contains(failure(read("https://evil.example.net/a.png", policy), StatusCode::failed_precondition),
                       "'evil.example.net', which is not in allowed_media_hosts"));
  // The host is the authority's, whatever the path or credentials try.
  EXPECT_TRUE(contains(failure(read("http://images.example.com@evil.net/", policy), StatusCode::invalid_argument),
                       "credentials"));
  EXPECT_TRUE(contains(failure(read("http://evil.net/images.example.com", policy), StatusCode::failed_precondition),
                       "evil.net"));
}

TEST(MediaSource, ParsesHttpUrls) {
  auto u = parse_http_url("HTTP://Example.COM:8080/a/b.png?x=1#frag");
  ASSERT_TRUE(u.has_value());
  EXPECT_FALSE(u->https);
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->target, "/a/b.png?x=1");
  EXPECT_EQ(u->authority(), "example.com:8080");
  u = parse_http_url("https://[::1]/x");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->authority(), "[::1]");
  EXPECT_EQ(parse_http_url("http://h?q")->target, "/?q");
  EXPECT_FALSE(parse_http_url("http://h:99999/").has_value());
  EXPECT_FALSE(parse_http_url("http:///path").has_value());
  EXPECT_FALSE(parse_http_url("http://h/a b").has_value());
  auto next = resolve_redirect(*parse_http_url("http://h:81/a/b.png"), "c.png");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->target, "/a/c.png");
  EXPECT_EQ(next->port, 81);
  EXPECT_EQ(resolve_redirect(*parse_http_url("https://h/a/b"), "/z")->target, "/z");
  EXPECT_EQ(resolve_redirect(*parse_http_url("https://h/a/b"), "//other/z")->host, "other");
}

// A loopback server for `connections` requests: each request's head goes to `answer`, whose
// reply is written back raw ("" = answer nothing and hold the connection until the client
// leaves). TLS when a context is given.
class LoopbackServer {
 public:
  using Answer = std::function<std::string(const std::string& request)>;

  LoopbackServer(Answer answer, int connections, void* tls_context = nullptr)
      : answer_(std::move(answer)), tls_(tls_context) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(::listen(fd_, 8), 0);
    thread_ = std::thread([this, connections] {
      for (int i = 0; i < connections && !stop_; ++i) serve_one();
    });
  }
  ~LoopbackServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string url(const std::string& path, const char* host = "127.0.0.1") const {
    return std::string(tls_ ? "https://" : "http://") + host + ":" + std::to_string(port_) + path;
  }
  std::string last_request() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }

 private:
  // Waits for `fd` to be readable, giving up when the test is over.
  bool wait_readable(int fd) {
    for (int waited = 0; waited < 15000 && !stop_; waited += 50) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) return true;
    }
    return false;
  }

  void serve_one() {
    if (!wait_readable(fd_)) return;
    const int client = ::accept(fd_, nullptr, nullptr);
    if (client < 0) return;
#if PRISM_HAVE_OPENSSL
    SSL* ssl = nullptr;
    if (tls_) {
      ssl = SSL_new(static_cast<SSL_CTX*>(tls_));
      SSL_set_fd(ssl, client);
      if (SSL_accept(ssl) != 1) {  // e.g. the client refused our certificate
        SSL_free(ssl);
        ::close(client);
        return;
      }
    }
    auto recv_some = [&](char* buf, int n) { return ssl ? SSL_read(ssl, buf, n) : int(::recv(client, buf, n, 0)); };
    auto send_all = [&](const std::string& s) {
      if (ssl) SSL_write(ssl, s.data(), int(s.size()));
      else ::send(client, s.data(), s.size(), MSG_NOSIGNAL);
    };
#else
    auto recv_some = [&](char* buf, int n) { return int(::recv(client, buf, n, 0)); };
    auto send_all = [&](const std::string& s) { ::send(client, s.data(), s.size(), MSG_NOSIGNAL); };
#endif
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      if (!wait_readable(client)) break;
      const int n = recv_some(buf, sizeof buf);
      if (n <= 0) break;
      request.append(buf, size_t(n));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_request_ = request;
    }
    const std::string reply = answer_(request);
    if (reply.empty()) {
      while (wait_readable(client) && recv_some(buf, sizeof buf) > 0) {
      }
    } else {
      send_all(reply);
    }
#if PRISM_HAVE_OPENSSL
    if (ssl) {
      SSL_shutdown(ssl);
      SSL_free(ssl);
    }
#endif
    ::close(client);
  }

  Answer answer_;
  void* tls_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string last_request_;  // guarded by mu_
  std::thread thread_;
};

std::string http_reply(int status, const std::string& body, const std::string& extra_headers = "",
                       bool content_length = true) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " X\r\nConnection: close\r\n" + extra_headers;
  if (content_length) head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return head + "\r\n" + body;
}

MediaSourcePolicy loopback_policy() {
  MediaSourcePolicy p;
  p.allowed_hosts = {"127.0.0.1"};
  p.timeout_ms = 5000;
  return p;
}

TEST(MediaSource, FetchesAnAllowlistedHttpHost) {
  const Bytes png = sample_png();
  LoopbackServer server([&](const std::string&) {
    return http_reply(200, std::string(png.begin(), png.end()), "Content-Type: image/png; charset=binary\r\n");
  }, 1);
  auto r = read(server.url("/images/cat.png?size=7"), loopback_policy());
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->bytes, png);
  EXPECT_EQ(r->mime_type, "image/png");
  EXPECT_TRUE(contains(server.last_request(), "GET /images/cat.png?size=7 HTTP/1.1\r\n"));
  EXPECT_TRUE(contains(server.last_request(), "Host: 127.0.0.1:" + std::to_string(server.port())));
}

TEST(MediaSource, RemoteByteLimitHoldsWithAndWithoutContentLength) {
  MediaSourcePolicy policy = loopback_policy();
  policy.max_bytes = 1000;
  for (bool content_length : {true, false}) {
    SCOPED_TRACE(content_length ? "Content-Length" : "read to close");
    LoopbackServer server([&](const std::string&) { return http_reply(200, std::string(5000, 'x'), "", content_length); },
                          1);
    EXPECT_TRUE(contains(failure(read(server.url("/big"), policy), StatusCode::invalid_argument),
                         "larger than the limit of 1000 bytes"));
  }
}

TEST(MediaSource, RedirectsAreFollowedAndRechecked) {
  LoopbackServer server([](const std::string& request) {
    if (contains(request, "GET /old ")) return http_reply(302, "", "Location: /new\r\n");
    if (contains(request, "GET /away ")) return http_reply(301, "", "Location: http://evil.example.net/x\r\n");
    return http_reply(200, "moved here");
  }, 3);
  auto r = read(server.url("/old"), loopback_policy());
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(std::string(r->bytes.begin(), r->bytes.end()), "moved here");
  EXPECT_TRUE(contains(failure(read(server.url("/away"), loopback_policy()), StatusCode::failed_precondition),
                       "evil.example.net"));
}

TEST(MediaSource, HttpErrorsTimeoutsAndRefusedConnections) {
  {
    LoopbackServer server([](const std::string&) { return http_reply(404, "no"); }, 1);
    EXPECT_TRUE(contains(failure(read(server.url("/gone"), loopback_policy()), StatusCode::invalid_argument), "HTTP 404"));
  }
  {
    LoopbackServer server([](const std::string&) { return http_reply(503, "busy"); }, 1);
    EXPECT_TRUE(contains(failure(read(server.url("/busy"), loopback_policy()), StatusCode::unavailable), "HTTP 503"));
  }
  {
    LoopbackServer server([](const std::string&) { return std::string(); }, 1);  // never answers
    MediaSourcePolicy policy = loopback_policy();
    policy.timeout_ms = 300;
    EXPECT_TRUE(contains(failure(read(server.url("/slow"), policy), StatusCode::unavailable), "within 300 ms"));
  }
  int closed_port = 0;
  {
    LoopbackServer server([](const std::string&) { return std::string(); }, 0);
    closed_port = server.port();
  }
  EXPECT_TRUE(contains(failure(read("http://127.0.0.1:" + std::to_string(closed_port) + "/", loopback_policy()),
                               StatusCode::unavailable),
                       "connect"));
}

#if PRISM_HAVE_OPENSSL

// A self-signed certificate for "localhost", made with the openssl tool.
struct TestCertificate {
  std::string cert, key;
  bool made = false;
  TestCertificate() {
    const std::string dir = test::scratch_dir("media_source_tls");
    cert = dir + "/cert.pem";
    key = dir + "/key.pem";
    const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
                            "-subj /CN=localhost -addext subjectAltName=DNS:localhost -keyout " +
                            key + " -out " + cert + " >/dev/null 2>&1";
    made = std::system(cmd.c_str()) == 0;
  }
};

TEST(MediaSource, HttpsWithCertificateChecks) {
  const TestCertificate certificate;
  if (!certificate.made) GTEST_SKIP() << "the openssl tool is not installed";
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  ASSERT_EQ(SSL_CTX_use_certificate_file(ctx, certificate.cert.c_str(), SSL_FILETYPE_PEM), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey_file(ctx, certificate.key.c_str(), SSL_FILETYPE_PEM), 1);
  const Bytes png = sample_png();
  {
    LoopbackServer server([&](const std::string&) { return http_reply(200, std::string(png.begin(), png.end())); }, 1,
                          ctx);
    auto url = parse_http_url(server.url("/cat.png", "localhost"));
    ASSERT_TRUE(url.has_value());
    HttpFetchOptions options;
    options.ca_file = certificate.cert;  // trusted: the fetch succeeds
    auto response = http_get(*url, options);
    ASSERT_TRUE(response.has_value()) << response.status().to_string();
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, png);
  }
  {
    LoopbackServer server([&](const std::string&) { return http_reply(200, "never sent"); }, 1, ctx);
    MediaSourcePolicy policy = loopback_policy();
    policy.allowed_hosts = {"localhost"};
    // The system's trust store does not know the self-signed certificate: refused.
    EXPECT_TRUE(contains(failure(read(server.url("/cat.png", "localhost"), policy), StatusCode::unavailable),
                         "TLS handshake"));
  }
  SSL_CTX_free(ctx);
}

#else

TEST(MediaSource, HttpsIsRefusedWithoutTls) {
  MediaSourcePolicy policy;
  policy.allowed_hosts = {"images.example.com"};
  EXPECT_FALSE(https_fetch_supported());
  EXPECT_TRUE(contains(failure(read("https://images.example.com/a.png", policy), StatusCode::invalid_argument),
                       "https fetching is not built in"));
}

#endif

}  // namespace
}  // namespace prism::media

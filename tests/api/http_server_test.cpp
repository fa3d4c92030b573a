// tests/api/http_server_test.cpp: the HTTP server driven over loopback with a raw blocking
// socket client (bytes in, bytes out), so malformed and slow clients can be played exactly.
// Handlers here are test doubles; deployments answer from their own threads, as here.
// No test asserts on time: waits are generous upper bounds for behaviour to show.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/errors.h"
#include "api/http_server.h"
#include "api/sse.h"

namespace prism::api {
namespace {

using namespace std::chrono_literals;

constexpr int kWaitMs = 10'000;  // generous: only a broken server waits this long

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // chunked bodies decoded
  std::vector<std::string> chunks;             // the chunks as sent, for chunked bodies
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// A blocking HTTP/1.1 client over one TCP connection.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads one response; status 0 when the connection ended or nothing came in time.
  HttpReply read_reply() {
    HttpReply r;
    std::size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return r;
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    std::size_t eol = head.find("\r\n");
    std::string status_line = head.substr(0, eol);
    if (status_line.size() < 12) return r;
    r.status = std::stoi(status_line.substr(9, 3));
    while (eol != std::string::npos) {
      std::size_t next = head.find("\r\n", eol + 2);
      std::string line = head.substr(eol + 2, next == std::string::npos ? std::string::npos : next - eol - 2);
      std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[name] = value;
      }
      eol = next;
    }
    if (r.status == 100) return r;
    if (r.header("transfer-encoding") == "chunked") {
      while (true) {
        std::size_t le;
        while ((le = buf_.find("\r\n")) == std::string::npos)
          if (!fill()) return HttpReply{};
        const std::size_t size = std::stoul(buf_.substr(0, le), nullptr, 16);
        buf_.erase(0, le + 2);
        while (buf_.size() < size + 2)
          if (!fill()) return HttpReply{};
        if (size == 0) {
          buf_.erase(0, 2);
          break;
        }
        r.chunks.push_back(buf_.substr(0, size));
        r.body += r.chunks.back();
        buf_.erase(0, size + 2);
      }
    } else {
      const std::size_t len = r.headers.count("content-length") ? std::stoul(r.header("content-length")) : 0;
      while (buf_.size() < len)
        if (!fill()) return HttpReply{};
      r.body = buf_.substr(0, len);
      buf_.erase(0, len);
    }
    return r;
  }

  // True when the server closes the connection (EOF or reset) within kWaitMs.
  bool wait_closed_by_peer() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char tmp[4096];
        ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
        if (n <= 0) return true;
      }
    }
    return false;
  }

 private:
  bool fill() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, kWaitMs) <= 0) return false;
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "\r\n";
}

std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

// The error object of an OpenAI-shaped error body, or null when the body is not one.
nlohmann::json error_of(const HttpReply& r) {
  nlohmann::json j = r.json();
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) return nullptr;
  const nlohmann::json& e = j["error"];
  if (!e.contains("message") || !e.contains("type") || !e.contains("param") || !e.contains("code")) return nullptr;
  return e;
}

// Shared among a test's handlers and its body: what the deployment side saw.
struct Probe {
  std::mutex mu;
  std::vector<Responder> held;  // requests a "deployment" holds on to
  std::promise<void> got_request;
  std::atomic<int> cancel_callbacks{0};
};

HttpServerOptions test_options() {
  HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.max_body_bytes = 4096;
  o.max_header_bytes = 4096;
  o.read_timeout_ms = 5000;
  o.idle_timeout_ms = 5000;
  o.request_timeout_ms = 60'000;
  o.shutdown_grace_ms = 5000;
  o.num_io_threads = 2;
  return o;
}

Router test_router(std::shared_ptr<Probe> probe) {
  Router r;
  r.add("GET", "/health", [](const Request&, Responder res) { res.send(Response::json(200, R"({"status":"ok"})")); });
  r.add("GET", "/hello", [](const Request& req, Responder res) { res.send(Response::text(200, "hello " + req.request_id)); });
  r.add("POST", "/echo", [](const Request& req, Responder res) { res.send(Response::text(200, req.body)); });
  r.add("GET", "/v1/videos/{id}", [](const Request& req, Responder res) {
    res.send(Response::text(200, std::string(req.path_param("id")) + "|" + std::string(req.query_param("v"))));
  });
  r.add("GET", "/throw", [](const Request&, Responder) -> void { throw std::runtime_error("secret /etc/internal detail"); });
  r.add("GET", "/drop", [](const Request&, Responder) {});
  // Answers from another thread, as a deployment does.
  r.add("GET", "/async", [](const Request&, Responder res) {
    std::thread([res]() mutable { res.send(Response::text(200, "later")); }).detach();
  });
  r.add("GET", "/stream", [](const Request&, Responder res) {
    StreamWriter w = res.start_stream("text/plain");
    std::thread([w]() mutable {
      for (const char* c : {"alpha", "beta", "gamma"}) w.write(c);
      w.close();
    }).detach();
  });
  r.add("GET", "/sse", [](const Request&, Responder res) {
    StreamWriter w = start_sse(res);
    std::thread([w]() mutable {
      for (int i = 0; i < 3; ++i) w.write(sse_event(nlohmann::json{{"i", i}}.dump()));
      w.write(std::string(sse_done()));
      w.close();
    }).detach();
  });
  // Holds the request until the test answers it: a slow deployment.
  r.add("GET", "/hold", [probe](const Request&, Responder res) {
    res.on_cancel([probe] { probe->cancel_callbacks.fetch_add(1); });
    std::lock_guard<std::mutex> lock(probe->mu);
    probe->held.push_back(res);
    probe->got_request.set_value();
  });
  return r;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpServerOptions o = test_options()) {
    server_ = std::make_unique<HttpServer>(std::move(o), test_router(probe_));
    ASSERT_TRUE(server_->start().ok());
    ASSERT_GT(server_->port(), 0);
  }
  int port() const { return server_->port(); }
  // One request on a fresh connection.
  HttpReply once(const std::string& bytes) {
    RawClient c(port());
    EXPECT_TRUE(c.connected());
    c.send(bytes);
    return c.read_reply();
  }
  bool wait_held() {
    return probe_->got_request.get_future().wait_for(std::chrono::milliseconds(kWaitMs)) == std::future_status::ready;
  }

  std::shared_ptr<Probe> probe_ = std::make_shared<Probe>();
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.send(get("/hello")));
  HttpReply a = c.read_reply();
  ASSERT_TRUE(c.send(get("/hello")));
  HttpReply b = c.read_reply();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(b.status, 200);
  EXPECT_FALSE(a.header("x-request-id").empty());
  EXPECT_NE(a.header("x-request-id"), b.header("x-request-id"));
  EXPECT_EQ(a.body, "hello " + a.header("x-request-id"));
}

TEST_F(HttpServerTest, PipelinedRequestsAnswerInOrder) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.send(post("/echo", "one") + post("/echo", "two")));
  EXPECT_EQ(c.read_reply().body, "one");
  EXPECT_EQ(c.read_reply().body, "two");
}

TEST_F(HttpServerTest, ClientRequestIdIsEchoed) {
  start();
  HttpReply r = once(get("/hello", "X-Request-Id: abc-123\r\n"));
  EXPECT_EQ(r.header("x-request-id"), "abc-123");
}

TEST_F(HttpServerTest, ChunkedRequestBodyIsDecoded) {
  start();
  HttpReply r = once("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "abcde");
}

TEST_F(HttpServerTest, ExpectContinueGetsInterimResponse) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(c.read_reply().status, 100);
  ASSERT_TRUE(c.send("hello"));
  HttpReply r = c.read_reply();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
}

TEST_F(HttpServerTest, PathAndQueryParameters) {
  start();
  EXPECT_EQ(once(get("/v1/videos/vid_42?x=1&v=9")).body, "vid_42|9");
  EXPECT_EQ(once(get("/v1/videos/")).status, 404);  // {id} needs a non-empty segment
}

TEST_F(HttpServerTest, AnswerFromAnotherThread) {
  start();
  HttpReply r = once(get("/async"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "later");
}

TEST_F(HttpServerTest, ChunkedStreamArrivesInOrderThenConnectionIsReused) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.send(get("/stream")));
  HttpReply r = c.read_reply();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("transfer-encoding"), "chunked");
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"alpha", "beta", "gamma"}));
  ASSERT_TRUE(c.send(get("/hello")));
  EXPECT_EQ(c.read_reply().status, 200);
}

TEST_F(HttpServerTest, ServerSentEventsEndWithDone) {
  start();
  HttpReply r = once(get("/sse"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.header("cache-control"), "no-cache");
  EXPECT_EQ(r.body, "data: {\"i\":0}\n\ndata: {\"i\":1}\n\ndata: {\"i\":2}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(r.chunks.size(), 4u);  // one event per chunk: each is flushed on its own
}

TEST_F(HttpServerTest, UnknownRouteIs404Json) {
  start();
  HttpReply r = once(get("/nope"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_FALSE(r.header("x-request-id").empty());
  nlohmann::json e = error_of(r);
  ASSERT_TRUE(e.is_object()) << r.body;
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_NE(e["message"].get<std::string>().find("/nope"), std::string::npos);
}

TEST_F(HttpServerTest, WrongMethodIs405WithAllow) {
  start();
  HttpReply r = once(post("/hello", "{}"));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "GET");
  EXPECT_TRUE(error_of(r).is_object()) << r.body;
}

TEST_F(HttpServerTest, MalformedRequestLineIs400Json) {
  start();
  HttpReply r = once("GET /hello HTTP/9.Z\r\n\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(error_of(r).is_object()) << r.body;
  EXPECT_EQ(once(get("/hello")).status, 200);  // still serving
}

TEST_F(HttpServerTest, ContentLengthOverLimitIs413BeforeTheBody) {
  start();
  // 100 MB announced, a few bytes sent: refused from the header alone.
  HttpReply r = once("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n{\"a\":");
  EXPECT_EQ(r.status, 413);
  nlohmann::json e = error_of(r);
  ASSERT_TRUE(e.is_object()) << r.body;
  EXPECT_EQ(e["code"], "request_too_large");
  EXPECT_EQ(once(get("/hello")).status, 200);
}

TEST_F(HttpServerTest, ChunkedBodyOverLimitIs413) {
  start();
  std::string chunk(1500, 'x');
  std::string req = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) req += "5dc\r\n" + chunk + "\r\n";  // 4 x 1500 > 4096
  req += "0\r\n\r\n";
  HttpReply r = once(req);
  EXPECT_EQ(r.status, 413);
  EXPECT_TRUE(error_of(r).is_object()) << r.body;
}

TEST_F(HttpServerTest, HugeHeaderIsRefused) {
  start();
  HttpReply r = once(get("/hello", "X-Big: " + std::string(8000, 'a') + "\r\n"));
  EXPECT_EQ(r.status, 431);
  EXPECT_TRUE(error_of(r).is_object()) << r.body;
}

TEST_F(HttpServerTest, SlowHeadersAreTimedOutWhileOthersAreServed) {
  HttpServerOptions o = test_options();
  o.read_timeout_ms = 300;
  o.idle_timeout_ms = 300;
  start(o);
  RawClient slow(port());
  ASSERT_TRUE(slow.send("GET /hello HTTP/1.1\r\nHost: x\r\nX-A: "));  // never finished
  RawClient dripping(port());
  std::atomic<bool> stop{false};
  std::thread drip([&] {  // one byte every 50 ms: a slowloris
    while (!stop && dripping.send("a")) std::this_thread::sleep_for(50ms);
  });
  EXPECT_EQ(once(get("/hello")).status, 200);
  EXPECT_TRUE(slow.wait_closed_by_peer());
  EXPECT_TRUE(dripping.wait_closed_by_peer());
  stop = true;
  drip.join();
  EXPECT_EQ(once(get("/hello")).status, 200);
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionIsClosed) {
  HttpServerOptions o = test_options();
  o.idle_timeout_ms = 200;
  start(o);
  RawClient c(port());
  ASSERT_TRUE(c.send(get("/hello")));
  EXPECT_EQ(c.read_reply().status, 200);
  EXPECT_TRUE(c.wait_closed_by_peer());
}

TEST_F(HttpServerTest, ApiKeyRequiredExceptOnOpenPaths) {
  HttpServerOptions o = test_options();
  o.api_keys = {"sk-right"};
  start(o);
  HttpReply none = once(get("/hello"));
  EXPECT_EQ(none.status, 401);
  ASSERT_TRUE(error_of(none).is_object()) << none.body;
  EXPECT_EQ(error_of(none)["code"], "invalid_api_key");
  EXPECT_EQ(once(get("/hello", "Authorization: Bearer sk-wrong\r\n")).status, 401);
  EXPECT_EQ(once(get("/hello", "Authorization: Basic sk-right\r\n")).status, 401);
  EXPECT_EQ(once(get("/hello", "Authorization: Bearer sk-right\r\n")).status, 200);
  EXPECT_EQ(once(get("/health")).status, 200);
  // Unknown routes do not reveal themselves to clients without a key.
  EXPECT_EQ(once(get("/nope")).status, 401);
}

TEST_F(HttpServerTest, HandlerExceptionIs500WithoutInternals) {
  start();
  HttpReply r = once(get("/throw"));
  EXPECT_EQ(r.status, 500);
  nlohmann::json e = error_of(r);
  ASSERT_TRUE(e.is_object()) << r.body;
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_EQ(r.body.find("secret"), std::string::npos);
  EXPECT_EQ(r.body.find("/etc"), std::string::npos);
  EXPECT_EQ(once(get("/hello")).status, 200);
}

TEST_F(HttpServerTest, DroppedResponderIs500) {
  start();
  HttpReply r = once(get("/drop"));
  EXPECT_EQ(r.status, 500);
  EXPECT_TRUE(error_of(r).is_object()) << r.body;
}

TEST_F(HttpServerTest, HandlerPastDeadlineIs504AndCancelled) {
  HttpServerOptions o = test_options();
  o.request_timeout_ms = 200;
  start(o);
  HttpReply r = once(get("/hold"));
  EXPECT_EQ(r.status, 504);
  EXPECT_TRUE(error_of(r).is_object()) << r.body;
  std::lock_guard<std::mutex> lock(probe_->mu);
  ASSERT_EQ(probe_->held.size(), 1u);
  EXPECT_TRUE(probe_->held[0].cancelled());
  EXPECT_EQ(probe_->cancel_callbacks.load(), 1);
  EXPECT_FALSE(probe_->held[0].send(Response::text(200, "too late")));
}

TEST_F(HttpServerTest, ClientDisconnectCancelsTheRequest) {
  start();
  {
    RawClient c(port());
    ASSERT_TRUE(c.send(get("/hold")));
    ASSERT_TRUE(wait_held());
  }  // the client goes away mid-request
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (probe_->cancel_callbacks.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(probe_->cancel_callbacks.load(), 1);
  std::lock_guard<std::mutex> lock(probe_->mu);
  EXPECT_TRUE(probe_->held[0].cancelled());
  probe_->held[0].send(Response::text(200, "nobody listens"));  // harmless
}

TEST_F(HttpServerTest, TooManyConnectionsGet503) {
  HttpServerOptions o = test_options();
  o.max_connections = 2;
  start(o);
  RawClient a(port()), b(port());
  ASSERT_TRUE(a.send(get("/hello")));
  ASSERT_TRUE(b.send(get("/hello")));
  EXPECT_EQ(a.read_reply().status, 200);  // both registered and served (kept alive)
  EXPECT_EQ(b.read_reply().status, 200);
  HttpReply r = once(get("/hello"));
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(error_of(r).is_object()) << r.body;
  a.close();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (server_->num_connections() >= 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(once(get("/hello")).status, 200);
}

TEST_F(HttpServerTest, ServesManyConcurrentConnections) {
  HttpServerOptions o = test_options();
  o.max_connections = 1024;
  start(o);
  constexpr int kClients = 250;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<RawClient>(port()));
    ASSERT_TRUE(clients.back()->connected());
  }
  for (auto& c : clients) ASSERT_TRUE(c->send(get("/async")));  // all in flight at once
  int ok = 0;
  for (auto& c : clients) ok += c->read_reply().status == 200;
  EXPECT_EQ(ok, kClients);
}

TEST_F(HttpServerTest, GracefulShutdownDrainsTheRequestInFlight) {
  start();
  RawClient c(port());
  ASSERT_TRUE(c.send(get("/hold")));
  ASSERT_TRUE(wait_held());
  RawClient idle(port());  // an idle keep-alive connection is closed at once
  ASSERT_TRUE(idle.connected());
  std::thread runner([&] { EXPECT_TRUE(server_->run().ok()); });
  server_->request_shutdown();
  EXPECT_TRUE(idle.wait_closed_by_peer());
  {
    std::lock_guard<std::mutex> lock(probe_->mu);
    EXPECT_FALSE(probe_->held[0].cancelled());
    EXPECT_TRUE(probe_->held[0].send(Response::text(200, "finished")));
  }
  HttpReply r = c.read_reply();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "finished");
  EXPECT_EQ(r.header("connection"), "close");
  c.close();
  runner.join();  // run() returned once the last connection closed
  EXPECT_FALSE(RawClient(port()).connected());  // no longer accepting
}

TEST_F(HttpServerTest, ShutdownPastGraceCancelsWhatIsLeft) {
  HttpServerOptions o = test_options();
  o.shutdown_grace_ms = 100;
  start(o);
  RawClient c(port());
  ASSERT_TRUE(c.send(get("/hold")));
  ASSERT_TRUE(wait_held());
  server_->request_shutdown();
  EXPECT_TRUE(server_->run().ok());
  std::lock_guard<std::mutex> lock(probe_->mu);
  EXPECT_TRUE(probe_->held[0].cancelled());
  EXPECT_FALSE(probe_->held[0].send(Response::text(200, "after shutdown")));  // no crash
}

}  // namespace
}  // namespace prism::api

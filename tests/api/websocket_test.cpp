// tests/api/websocket_test.cpp: WebSocket routes driven by Beast's own (blocking) client:
// echo of text and binary messages, server pushes from another thread, close from either
// side, auth on the upgrade, and shutdown with a socket open.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <gtest/gtest.h>

#include "api/http_server.h"

namespace prism::api {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

struct WsProbe {
  std::mutex mu;
  std::vector<WebSocketConn> conns;
  std::atomic<int> closes{0};
  std::string last_path_param;
};

Router ws_router(std::shared_ptr<WsProbe> probe) {
  Router r;
  r.add("GET", "/health", [](const Request&, Responder res) { res.send(Response::json(200, "{}")); });
  r.add_websocket("/v1/echo/{room}", [probe](const Request& req, WebSocketConn conn) {
    {
      std::lock_guard<std::mutex> lock(probe->mu);
      probe->conns.push_back(conn);
      probe->last_path_param = std::string(req.path_param("room"));
    }
    WebSocketCallbacks cb;
    cb.on_message = [conn](std::string_view msg, bool binary) mutable {
      if (msg == "push3") {  // answers from another thread, as an engine does
        std::thread([conn]() mutable {
          for (int i = 0; i < 3; ++i) conn.send_text("event " + std::to_string(i));
        }).detach();
      } else if (msg == "bye") {
        conn.close(websocket::close_code::normal, "done");
      } else if (binary) {
        conn.send_binary(std::string(msg));
      } else {
        conn.send_text(std::string(msg));
      }
    };
    cb.on_close = [probe] { probe->closes.fetch_add(1); };
    return cb;
  });
  return r;
}

class WebSocketTest : public ::testing::Test {
 protected:
  void start(HttpServerOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.shutdown_grace_ms = 2000;
    server_ = std::make_unique<HttpServer>(std::move(o), ws_router(probe_));
    ASSERT_TRUE(server_->start().ok());
  }

  // A connected client; an empty optional when the handshake was refused (status in *status).
  std::unique_ptr<websocket::stream<tcp::socket>> connect(const std::string& target, const std::string& key = "",
                                                          int* status = nullptr) {
    auto ws = std::make_unique<websocket::stream<tcp::socket>>(ioc_);
    ws->next_layer().connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server_->port())));
    if (!key.empty())
      ws->set_option(websocket::stream_base::decorator(
          [key](websocket::request_type& req) { req.set(http::field::authorization, "Bearer " + key); }));
    websocket::response_type res;
    beast::error_code ec;
    ws->handshake(res, "127.0.0.1", target, ec);
    if (status) *status = res.result_int();
    if (ec) return nullptr;
    return ws;
  }

  std::string read(websocket::stream<tcp::socket>& ws, bool* binary = nullptr) {
    beast::flat_buffer buf;
    ws.read(buf);
    if (binary) *binary = ws.got_binary();
    return beast::buffers_to_string(buf.data());
  }

  bool wait_for(const std::function<bool()>& cond) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!cond() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    return cond();
  }

  net::io_context ioc_;
  std::shared_ptr<WsProbe> probe_ = std::make_shared<WsProbe>();
  std::unique_ptr<HttpServer> server_;
};

TEST_F(WebSocketTest, EchoesTextAndBinaryThenClosesCleanly) {
  start();
  int status = 0;
  auto ws = connect("/v1/echo/r1", "", &status);
  ASSERT_NE(ws, nullptr);
  EXPECT_EQ(status, 101);
  ws->text(true);
  ws->write(net::buffer(std::string("hello")));
  bool binary = true;
  EXPECT_EQ(read(*ws, &binary), "hello");
  EXPECT_FALSE(binary);
  const std::string bytes("\x00\x01\xff", 3);
  ws->binary(true);
  ws->write(net::buffer(bytes));
  EXPECT_EQ(read(*ws, &binary), bytes);
  EXPECT_TRUE(binary);
  {
    std::lock_guard<std::mutex> lock(probe_->mu);
    EXPECT_EQ(probe_->last_path_param, "r1");
  }
  ws->close(websocket::close_code::normal);
  EXPECT_TRUE(wait_for([&] { return probe_->closes.load() == 1; }));
  std::lock_guard<std::mutex> lock(probe_->mu);
  EXPECT_TRUE(probe_->conns.at(0).closed());
  EXPECT_FALSE(probe_->conns.at(0).send_text("after close"));
}

TEST_F(WebSocketTest, PushesFromAnotherThreadArriveInOrder) {
  start();
  auto ws = connect("/v1/echo/r");
  ASSERT_NE(ws, nullptr);
  ws->text(true);
  ws->write(net::buffer(std::string("push3")));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(read(*ws), "event " + std::to_string(i));
}

TEST_F(WebSocketTest, ServerInitiatedClose) {
  start();
  auto ws = connect("/v1/echo/r");
  ASSERT_NE(ws, nullptr);
  ws->text(true);
  ws->write(net::buffer(std::string("bye")));
  beast::flat_buffer buf;
  beast::error_code ec;
  ws->read(buf, ec);
  EXPECT_EQ(ec, websocket::error::closed);
  EXPECT_EQ(ws->reason().code, websocket::close_code::normal);
  EXPECT_TRUE(wait_for([&] { return probe_->closes.load() == 1; }));
}

TEST_F(WebSocketTest, UpgradeNeedsTheApiKey) {
  HttpServerOptions o;
  o.api_keys = {"sk-ws"};
  start(o);
  // Beast 1.74's client does not hand back a declined handshake's response: send it by hand.
  auto refused_status = [&](const std::string& key) {
    tcp::socket s(ioc_);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server_->port())));
    http::request<http::empty_body> req{http::verb::get, "/v1/echo/r", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::upgrade, "websocket");
    req.set(http::field::connection, "Upgrade");
    req.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
    req.set(http::field::sec_websocket_version, "13");
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    EXPECT_NE(res.body().find("invalid_api_key"), std::string::npos) << res.body();
    return res.result_int();
  };
  EXPECT_EQ(refused_status(""), 401);
  EXPECT_EQ(refused_status("sk-wrong"), 401);
  int status = 0;
  auto ws = connect("/v1/echo/r", "sk-ws", &status);
  ASSERT_NE(ws, nullptr);
  EXPECT_EQ(status, 101);
  ws->text(true);
  ws->write(net::buffer(std::string("ok")));
  EXPECT_EQ(read(*ws), "ok");
}

TEST_F(WebSocketTest, PlainGetOnWebSocketRouteIs426) {
  start();
  tcp::socket s(ioc_);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server_->port())));
  http::request<http::empty_body> req{http::verb::get, "/v1/echo/r", 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(s, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  EXPECT_EQ(res.result_int(), 426);
  EXPECT_NE(res.body().find("\"error\""), std::string::npos);
}

TEST_F(WebSocketTest, ShutdownClosesOpenSocketsWithGoingAway) {
  start();
  auto ws = connect("/v1/echo/r");
  ASSERT_NE(ws, nullptr);
  ASSERT_TRUE(wait_for([&] {  // the handler has the connection (the handshake completed)
    std::lock_guard<std::mutex> lock(probe_->mu);
    return probe_->conns.size() == 1;
  }));
  std::thread runner([&] { EXPECT_TRUE(server_->run().ok()); });
  server_->request_shutdown();
  beast::flat_buffer buf;
  beast::error_code ec;
  ws->read(buf, ec);
  EXPECT_EQ(ec, websocket::error::closed);
  EXPECT_EQ(ws->reason().code, websocket::close_code::going_away);
  runner.join();
  EXPECT_EQ(probe_->closes.load(), 1);
}

}  // namespace
}  // namespace prism::api

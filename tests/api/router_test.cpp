// tests/api/router_test.cpp: route matching (exact, {param}, 404 vs 405, WebSocket routes)
// and Server-Sent Events formatting.
#include "api/router.h"

#include <gtest/gtest.h>

#include "api/sse.h"

namespace prism::api {
namespace {

Router make_router(std::vector<std::string>* hits) {
  Router r;
  auto h = [hits](std::string name) {
    return [hits, name](const Request&, Responder) { hits->push_back(name); };
  };
  r.add("GET", "/v1/models", h("list"));
  r.add("GET", "/v1/models/{model}", h("get"));
  r.add("POST", "/v1/videos", h("create"));
  r.add("GET", "/v1/videos/{id}/content", h("content"));
  r.add("DELETE", "/v1/videos/{id}", h("delete"));
  r.add("GET", "/v1/realtime", h("realtime-http"));
  r.add_websocket("/v1/realtime", [](const Request&, WebSocketConn) { return WebSocketCallbacks{}; });
  r.add_websocket("/v1/ws-only", [](const Request&, WebSocketConn) { return WebSocketCallbacks{}; });
  return r;
}

void call(const Router::Match& m) {
  ASSERT_EQ(m.kind, Router::Match::found);
  ASSERT_NE(m.handler, nullptr);
  (*m.handler)(Request{}, Responder{});
}

TEST(Router, ExactAndParameterRoutes) {
  std::vector<std::string> hits;
  Router r = make_router(&hits);
  call(r.match("GET", "/v1/models", false));
  Router::Match m = r.match("GET", "/v1/models/bge-small", false);
  call(m);
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0], (std::pair<std::string, std::string>{"model", "bge-small"}));
  m = r.match("GET", "/v1/videos/vid_1/content", false);
  call(m);
  EXPECT_EQ(m.params.at(0).second, "vid_1");
  EXPECT_EQ(hits, (std::vector<std::string>{"list", "get", "content"}));
}

TEST(Router, NotFoundAndMethodNotAllowed) {
  std::vector<std::string> hits;
  Router r = make_router(&hits);
  EXPECT_EQ(r.match("GET", "/v1/nothing", false).kind, Router::Match::not_found);
  EXPECT_EQ(r.match("GET", "/v1/models/", false).kind, Router::Match::not_found);
  EXPECT_EQ(r.match("GET", "/v1/models/a/b", false).kind, Router::Match::not_found);
  Router::Match m = r.match("GET", "/v1/videos", false);
  EXPECT_EQ(m.kind, Router::Match::method_not_allowed);
  EXPECT_EQ(m.allow, "POST");
  m = r.match("PUT", "/v1/videos/x", false);
  EXPECT_EQ(m.kind, Router::Match::method_not_allowed);
  EXPECT_EQ(m.allow, "DELETE");
  EXPECT_EQ(r.match("get", "/v1/models", false).kind, Router::Match::method_not_allowed);
}

TEST(Router, WebSocketRoutes) {
  std::vector<std::string> hits;
  Router r = make_router(&hits);
  Router::Match m = r.match("GET", "/v1/realtime", true);
  EXPECT_EQ(m.kind, Router::Match::found);
  EXPECT_NE(m.ws_handler, nullptr);
  EXPECT_EQ(m.handler, nullptr);
  m = r.match("GET", "/v1/realtime", false);  // the plain route of the same path
  EXPECT_NE(m.handler, nullptr);
  EXPECT_EQ(r.match("GET", "/v1/ws-only", false).kind, Router::Match::upgrade_required);
  EXPECT_EQ(r.match("GET", "/v1/models", true).kind, Router::Match::found);  // served as plain HTTP
}

TEST(Sse, EventFormatting) {
  EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_event("line1\nline2"), "data: line1\ndata: line2\n\n");
  EXPECT_EQ(sse_event("x", "delta"), "event: delta\ndata: x\n\n");
  EXPECT_EQ(sse_event(""), "data: \n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(Responder, EmptyHandlesAreInert) {
  Responder r;
  EXPECT_FALSE(r.send(Response::text(200, "x")));
  EXPECT_FALSE(r.cancelled());
  StreamWriter w = r.start_stream("text/plain");
  EXPECT_FALSE(w.write("x"));
  EXPECT_TRUE(w.cancelled());
  w.close();
  WebSocketConn c;
  EXPECT_FALSE(c.send_text("x"));
  EXPECT_TRUE(c.closed());
}

}  // namespace
}  // namespace prism::api

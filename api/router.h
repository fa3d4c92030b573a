// api/router.h: the route table. A route is a method plus a path pattern: exact segments and
// {name} segments that match one non-empty segment ("/v1/videos/{id}"). Matching is by
// segments, first registered wins; a path that matches a pattern under another method only
// is a 405 with the methods that would do. Built before the server starts; read-only after.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/http_types.h"
#include "api/websocket.h"

namespace prism::api {

class Router {
 public:
  // method: "GET", "POST", ... (case-sensitive, as HTTP says).
  void add(std::string method, std::string pattern, Handler handler);
  // A WebSocket endpoint: GET with an Upgrade: websocket header.
  void add_websocket(std::string pattern, WebSocketHandler handler);

  struct Match {
    enum Kind { found, not_found, method_not_allowed, upgrade_required };
    Kind kind = not_found;
    const Handler* handler = nullptr;               // found, plain HTTP route
    const WebSocketHandler* ws_handler = nullptr;   // found, WebSocket route
    HeaderList params;                              // found: {name} -> segment
    std::string allow;                              // method_not_allowed: "GET, POST"
  };
  // upgrade: the request asks for a WebSocket upgrade. A WebSocket route asked without one
  // is upgrade_required (426); a plain route asked with one is served as plain HTTP.
  Match match(std::string_view method, std::string_view path, bool upgrade) const;

 private:
  struct Route {
    std::string method;  // "GET" for WebSocket routes
    std::vector<std::string> segments;
    Handler handler;
    WebSocketHandler ws_handler;
  };
  std::vector<Route> routes_;
};

}  // namespace prism::api

// api/router.cpp: segment matching over a small table (a linear scan: tens of routes).
#include "api/router.h"

namespace prism::api {

namespace {

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) out.emplace_back(path.substr(i, j - i));
    i = j + 1;
  }
  // "/a/" and "/a" differ: keep a trailing empty segment so they do not alias.
  if (path.size() > 1 && path.back() == '/') out.emplace_back();
  return out;
}

bool is_param(const std::string& segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

bool matches(const std::vector<std::string>& pattern, const std::vector<std::string>& path,
             HeaderList* params) {
  if (pattern.size() != path.size()) return false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (is_param(pattern[i])) {
      if (path[i].empty()) return false;
    } else if (pattern[i] != path[i]) {
      return false;
    }
  }
  if (params) {
    params->clear();
    for (std::size_t i = 0; i < pattern.size(); ++i)
      if (is_param(pattern[i])) params->emplace_back(pattern[i].substr(1, pattern[i].size() - 2), path[i]);
  }
  return true;
}

}  // namespace

void Router::add(std::string method, std::string pattern, Handler handler) {
  routes_.push_back({std::move(method), split_path(pattern), std::move(handler), {}});
}

void Router::add_websocket(std::string pattern, WebSocketHandler handler) {
  routes_.push_back({"GET", split_path(pattern), {}, std::move(handler)});
}

Router::Match Router::match(std::string_view method, std::string_view path, bool upgrade) const {
  const std::vector<std::string> segments = split_path(path);
  Match m;
  const Route* plain = nullptr;
  const Route* ws = nullptr;
  for (const Route& r : routes_) {
    if (!matches(r.segments, segments, nullptr)) continue;
    if (r.method != method) {
      if (m.allow.find(r.method) == std::string::npos) m.allow += (m.allow.empty() ? "" : ", ") + r.method;
      continue;
    }
    if (r.ws_handler && !ws) ws = &r;
    if (r.handler && !plain) plain = &r;
  }
  const Route* chosen = upgrade && ws ? ws : plain;
  if (chosen) {
    m.kind = Match::found;
    m.allow.clear();
    matches(chosen->segments, segments, &m.params);
    if (chosen->ws_handler) m.ws_handler = &chosen->ws_handler;
    else m.handler = &chosen->handler;
    return m;
  }
  if (ws) {
    m.kind = Match::upgrade_required;
    m.allow.clear();
    return m;
  }
  m.kind = m.allow.empty() ? Match::not_found : Match::method_not_allowed;
  return m;
}

}  // namespace prism::api

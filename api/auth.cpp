// api/auth.cpp: Bearer key comparison in constant time per key (no early exit on the first
// differing byte, so response timing does not reveal a key prefix).
#include "api/auth.h"

#include <algorithm>
#include <cctype>

namespace prism::api {

namespace {

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

ApiKeyAuth::ApiKeyAuth(std::vector<std::string> keys, std::vector<std::string> open_paths)
    : open_paths_(std::move(open_paths)) {
  for (std::string& k : keys)
    if (!k.empty()) keys_.push_back(std::move(k));
}

bool ApiKeyAuth::is_open(std::string_view path) const {
  for (const std::string& p : open_paths_) {
    if (!p.empty() && p.back() == '*') {
      if (path.substr(0, p.size() - 1) == std::string_view(p).substr(0, p.size() - 1)) return true;
    } else if (path == p) {
      return true;
    }
  }
  return false;
}

std::optional<ApiError> ApiKeyAuth::check(std::string_view path, std::string_view authorization) const {
  if (!enabled() || is_open(path)) return std::nullopt;
  std::string_view v = authorization;
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  if (v.empty()) return unauthorized(false);
  // The scheme is case-insensitive (RFC 7235).
  constexpr std::string_view kBearer = "bearer ";
  if (v.size() <= kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), v.begin(),
                  [](char s, char c) { return s == std::tolower(static_cast<unsigned char>(c)); }))
    return unauthorized(true);
  v.remove_prefix(kBearer.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  bool ok = false;
  for (const std::string& k : keys_) ok |= constant_time_equal(v, k);
  if (!ok) return unauthorized(true);
  return std::nullopt;
}

}  // namespace prism::api

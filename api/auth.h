// api/auth.h: API key check. With keys configured, every request outside the open paths
// must carry "Authorization: Bearer KEY" with one of them; with none configured, all pass.
// Open paths are exact paths ("/health") or prefixes ending in '*' ("/static/*").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/errors.h"

namespace prism::api {

class ApiKeyAuth {
 public:
  ApiKeyAuth() = default;
  ApiKeyAuth(std::vector<std::string> keys, std::vector<std::string> open_paths);

  bool enabled() const { return !keys_.empty(); }
  bool is_open(std::string_view path) const;
  // authorization: the Authorization header value ("" when absent). nullopt: allowed.
  std::optional<ApiError> check(std::string_view path, std::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
  std::vector<std::string> open_paths_;
};

}  // namespace prism::api

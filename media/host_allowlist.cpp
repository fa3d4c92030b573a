#include "media/host_allowlist.h"

#include <cctype>

namespace prism::media {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

bool host_on_allowlist(std::string_view host, std::span<const std::string> allowed) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);  // "example.com." is example.com
  for (std::string_view pattern : allowed) {
    if (pattern.size() > 2 && pattern.substr(0, 2) == "*.") {
      const std::string_view suffix = pattern.substr(1);  // ".example.com"
      if (host.size() > suffix.size() && iequals(host.substr(host.size() - suffix.size()), suffix)) return true;
    } else if (!pattern.empty() && iequals(host, pattern)) {
      return true;
    }
  }
  return false;
}

}  // namespace prism::media

// media/host_allowlist.h: whether a remote media host is on the deployment's allowlist
// (knob allowed_media_hosts). Exact names, case-insensitive, or "*.example.com" for any
// subdomain of example.com (not example.com itself); IP literals match only exactly. A pure
// function, so the rule is tested without a network.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace prism::media {

bool host_on_allowlist(std::string_view host, std::span<const std::string> allowed);

}  // namespace prism::media

// media/media_source.h: where a media part's bytes come from, and the policy that decides
// whether they may be read. A request names media by URL: a base64 data URL (always allowed),
// a local file (file:///abs/path, only under the configured allowed directory, after
// resolving symlinks and "..") or a remote http(s) URL (refused unless its host is on the
// configured allowlist). Reading is synchronous: callers run it off the model threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::media {

struct MediaSourcePolicy {
  std::string allowed_local_dir;            // empty: local files refused
  std::vector<std::string> allowed_hosts;   // exact host names (or "*.example.com"); empty: remote refused
  int64_t max_bytes = 64ll << 20;           // refused past this (data URL decoded, file, download)
  int timeout_ms = 10000;                   // remote fetch: connect + read
};

struct MediaBytes {
  std::string mime_type;       // from the data URL or the HTTP Content-Type; may be empty
  std::vector<uint8_t> bytes;
};

// Reads `url` under `policy`. Errors are invalid_argument (malformed data URL, bad base64,
// unsupported scheme) or failed_precondition (a file outside the allowed directory, a host
// not on the allowlist, local files / remote URLs not enabled: the api answers 400), with a message that says which
// and how to enable it; not_found for a missing file; unavailable for a failed download.
// Messages are predicates ("is a file outside the allowed directory /srv/media").
Result<MediaBytes> read_media_url(std::string_view url, const MediaSourcePolicy& policy);

}  // namespace prism::media

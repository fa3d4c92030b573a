// read_media_url: data URLs decoded in memory, local files under the allowed directory only
// (the path resolved with every symlink and ".." first, then opened without following a
// final symlink), remote URLs only for allowlisted hosts (each redirect re-checked).
// Policy refusals are failed_precondition (HTTP 400): Status has no permission code.
// NOTE: the byte limit is enforced while reading (decoding, read(), the HTTP parser), never
// after a whole oversized input is in memory.
#include "media/media_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "media/host_allowlist.h"
#include "media/http_fetch.h"

namespace prism::media {

namespace {

namespace fs = std::filesystem;

constexpr int kMaxRedirects = 5;

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lowercase(s.substr(0, prefix.size())) == prefix;
}

Status too_large(const MediaSourcePolicy& policy) {
  return invalid_argument("is larger than the limit of " + std::to_string(policy.max_bytes) + " bytes");
}

// ---- data URLs -------------------------------------------------------------------------

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;  // standard and URL-safe alphabets
  if (c == '/' || c == '_') return 63;
  return -1;
}

// Standard or URL-safe base64; whitespace anywhere is skipped (wrapped lines), '=' padding is
// optional but only at the end. Written here because media/ sits below text/, whose
// tokenizer-file decoder is strict.
Status decode_base64(std::string_view text, const MediaSourcePolicy& policy, std::vector<uint8_t>& out) {
  out.clear();
  out.reserve(std::min<size_t>(text.size() / 4 * 3 + 3, size_t(std::max<int64_t>(policy.max_bytes, 0)) + 3));
  uint32_t bits = 0;
  int num_bits = 0, padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int v = base64_value(c);
    if (v < 0) {
      char shown[8];
      std::snprintf(shown, sizeof shown, std::isprint(static_cast<unsigned char>(c)) ? "%c" : "\\x%02x",
                    static_cast<unsigned char>(c));
      return invalid_argument(std::string("has invalid base64 data ('") + shown + "' at offset " + std::to_string(i) +
                              " of the data)");
    }
    if (padding > 0) return invalid_argument("has invalid base64 data ('=' before the end)");
    bits = (bits << 6) | uint32_t(v);
    num_bits += 6;
    if (num_bits >= 8) {
      num_bits -= 8;
      out.push_back(uint8_t(bits >> num_bits));
      if (int64_t(out.size()) > policy.max_bytes) return too_large(policy);
    }
  }
  if (num_bits == 6) return invalid_argument("has truncated base64 data (a lone final character)");
  if (padding > 2) return invalid_argument("has invalid base64 data (more than two '=' at the end)");
  return Status();
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; anything else copied. invalid_argument on a broken escape.
Result<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int hi = i + 2 < text.size() ? hex_value(text[i + 1]) : -1;
    const int lo = i + 2 < text.size() ? hex_value(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) return invalid_argument("has a broken %-escape at offset " + std::to_string(i));
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// data:[<mime>][;param=value]*[;base64],<data>
Result<MediaBytes> read_data_url(std::string_view url, const MediaSourcePolicy& policy) {
  std::string_view rest = url.substr(5);
  const size_t comma = rest.find(',');
  if (comma == std::string_view::npos) return invalid_argument("is a data URL without the ',' before its data");
  std::string_view header = rest.substr(0, comma), data = rest.substr(comma + 1);
  bool base64 = false;
  MediaBytes out;
  size_t start = 0;
  for (int index = 0; start <= header.size(); ++index) {
    const size_t semi = std::min(header.find(';', start), header.size());
    const std::string token = lowercase(header.substr(start, semi - start));
    if (index == 0) out.mime_type = token;
    else if (token == "base64") base64 = true;
    start = semi + 1;
  }
  if (data.find_first_not_of(" \t\r\n") == std::string_view::npos) return invalid_argument("is a data URL with no data");
  if (base64) {
    PRISM_RETURN_IF_ERROR(decode_base64(data, policy, out.bytes));
  } else {
    PRISM_ASSIGN_OR_RETURN(const std::string decoded, percent_decode(data));
    if (int64_t(decoded.size()) > policy.max_bytes) return too_large(policy);
    out.bytes.assign(decoded.begin(), decoded.end());
  }
  return out;
}

// ---- local files -----------------------------------------------------------------------

bool is_within(const fs::path& dir, const fs::path& path) {
  auto d = dir.begin(), p = path.begin();
  for (; d != dir.end(); ++d, ++p) {
    if (d->empty()) continue;  // a trailing separator
    if (p == path.end() || *d != *p) return false;
  }
  return true;
}

Result<std::vector<uint8_t>> read_limited(const std::string& path, const MediaSourcePolicy& policy) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return not_found("is a file that cannot be opened (" + std::error_code(errno, std::generic_category()).message() + ")");
  struct stat st {};
  Result<std::vector<uint8_t>> result = std::vector<uint8_t>{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    result = invalid_argument("is not a regular file");
  } else if (st.st_size > policy.max_bytes) {
    result = too_large(policy);
  } else {
    std::vector<uint8_t>& bytes = *result;
    bytes.resize(size_t(st.st_size) + 1);  // one more: a file that grew is caught
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += size_t(n);
    }
    if (int64_t(got) > policy.max_bytes) result = too_large(policy);
    else bytes.resize(got);
  }
  ::close(fd);
  return result;
}

Result<MediaBytes> read_local_file(std::string_view path_text, const MediaSourcePolicy& policy) {
  if (policy.allowed_local_dir.empty())
    return failed_precondition("is a local file, and local files are not enabled (set allowed_local_media_dir)");
  const fs::path path(path_text);
  if (!path.is_absolute()) return invalid_argument("is a local path that is not absolute");
  std::error_code ec;
  const fs::path dir = fs::canonical(policy.allowed_local_dir, ec);
  if (ec)
    return failed_precondition("is a local file, but the allowed directory " + policy.allowed_local_dir +
                               " does not exist");
  // Lexically first, so a path outside the directory is refused whether or not it exists.
  const fs::path normal = path.lexically_normal();
  if (!is_within(dir, normal) && !is_within(fs::path(policy.allowed_local_dir).lexically_normal(), normal))
    return failed_precondition("is a file outside the allowed directory " + dir.string());
  const fs::path resolved = fs::canonical(path, ec);  // every symlink and ".." resolved
  if (ec) return not_found("is a file that does not exist");
  if (!is_within(dir, resolved))
    return failed_precondition("is a file outside the allowed directory " + dir.string() + " (after resolving links)");
  MediaBytes out;
  PRISM_ASSIGN_OR_RETURN(out.bytes, read_limited(resolved.string(), policy));
  return out;
}

// file:///abs/path or file://localhost/abs/path (percent-escapes decoded).
Result<MediaBytes> read_file_url(std::string_view url, const MediaSourcePolicy& policy) {
  std::string_view rest = url.substr(5);
  if (rest.substr(0, 2) == "//") {
    rest.remove_prefix(2);
    const size_t slash = rest.find('/');
    const std::string host = lowercase(rest.substr(0, slash));
    if (!host.empty() && host != "localhost") return invalid_argument("is a file URL on another host ('" + host + "')");
    if (slash == std::string_view::npos) return invalid_argument("is a file URL without a path");
    rest = rest.substr(slash);
  }
  if (size_t q = rest.find_first_of("?#"); q != std::string_view::npos) rest = rest.substr(0, q);
  PRISM_ASSIGN_OR_RETURN(const std::string path, percent_decode(rest));
  if (path.find('\0') != std::string::npos) return invalid_argument("is a file URL with a NUL byte");
  return read_local_file(path, policy);
}

// ---- remote ------------------------------------------------------------------------------

Status check_host(const HttpUrl& url, const MediaSourcePolicy& policy) {
  if (policy.allowed_hosts.empty())
    return failed_precondition("is a remote URL, and remote media is not enabled (set allowed_media_hosts)");
  if (!host_on_allowlist(url.host, policy.allowed_hosts))
    return failed_precondition("is on host '" + url.host + "', which is not in allowed_media_hosts");
  return Status();
}

Result<MediaBytes> read_remote(std::string_view text, const MediaSourcePolicy& policy) {
  PRISM_ASSIGN_OR_RETURN(HttpUrl url, parse_http_url(text));
  HttpFetchOptions options;
  options.timeout_ms = policy.timeout_ms;
  options.max_bytes = policy.max_bytes;
  for (int hop = 0;; ++hop) {
    PRISM_RETURN_IF_ERROR(check_host(url, policy));
    PRISM_ASSIGN_OR_RETURN(HttpResponse response, http_get(url, options));
    const bool redirect = response.status == 301 || response.status == 302 || response.status == 303 ||
                          response.status == 307 || response.status == 308;
    if (redirect && !response.location.empty()) {
      if (hop == kMaxRedirects) return unavailable("could not be downloaded (more than 5 redirects)");
      PRISM_ASSIGN_OR_RETURN(url, resolve_redirect(url, response.location));
      continue;
    }
    if (response.status < 200 || response.status > 299) {
      const std::string why = "could not be downloaded (the server answered HTTP " + std::to_string(response.status) + ")";
      return response.status >= 400 && response.status < 500 ? invalid_argument(why) : unavailable(why);
    }
    MediaBytes out;
    out.mime_type = lowercase(response.content_type.substr(0, response.content_type.find(';')));
    out.bytes = std::move(response.body);
    return out;
  }
}

}  // namespace

Result<MediaBytes> read_media_url(std::string_view url, const MediaSourcePolicy& policy) {
  while (!url.empty() && std::isspace(static_cast<unsigned char>(url.front()))) url.remove_prefix(1);
  while (!url.empty() && std::isspace(static_cast<unsigned char>(url.back()))) url.remove_suffix(1);
  if (url.empty()) return invalid_argument("is an empty URL");
  if (istarts_with(url, "data:")) return read_data_url(url, policy);
  if (istarts_with(url, "file:")) return read_file_url(url, policy);
  if (url.front() == '/') return read_local_file(url, policy);
  if (istarts_with(url, "http://") || istarts_with(url, "https://")) return read_remote(url, policy);
  const size_t colon = url.find(':');
  if (colon != std::string_view::npos && colon < 16 && url.substr(0, colon).find('/') == std::string_view::npos)
    return invalid_argument("has the unsupported URL scheme '" + lowercase(url.substr(0, colon)) +
                            ":' (use data:, file://, http:// or https://)");
  return invalid_argument("is not a URL (use a data: URL such as data:image/png;base64,..., file://, http:// or https://)");
}

}  // namespace prism::media

// api/multipart.h: multipart/form-data bodies (RFC 7578 over RFC 2046), for uploads such
// as /v1/audio/transcriptions: named fields and files with their filename and content type.
// Parses a body already read in full (bounded by max_body_bytes); errors are
// invalid_argument Statuses whose message names the problem (the handler answers 400).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::api {

struct MultipartPart {
  std::string name;          // Content-Disposition name
  std::string filename;      // Content-Disposition filename; "" for a plain field
  bool is_file = false;      // a filename parameter was present (even if empty)
  std::string content_type;  // the part's Content-Type; "" when absent (text/plain per RFC 7578)
  std::string data;          // the part's bytes, exactly as sent
};

struct MultipartForm {
  std::vector<MultipartPart> parts;  // in body order

  // The first part of that name, or nullptr.
  const MultipartPart* find(std::string_view name) const;
};

// The boundary parameter of a multipart/form-data Content-Type header value (quotes removed).
Result<std::string> multipart_boundary(std::string_view content_type);

// Parses body under the boundary of content_type. At most max_parts parts.
Result<MultipartForm> parse_multipart(std::string_view content_type, std::string_view body,
                                      std::size_t max_parts = 256);

}  // namespace prism::api

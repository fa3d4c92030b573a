// api/multipart.cpp: a multipart/form-data parser over a body held in memory.
// NOTE: a part's content runs from the blank line after its headers to the CRLF that
// precedes the next "--boundary"; RFC 2046 puts that CRLF with the delimiter, not the data.
#include "api/multipart.h"

#include <algorithm>
#include <cctype>

namespace prism::api {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Splits `type; a=b; c="d;e"` into the type and its parameters (names lower-cased, quotes
// and backslash escapes removed). Returns false on an unterminated quoted string.
bool split_params(std::string_view value, std::string* type,
                  std::vector<std::pair<std::string, std::string>>* params) {
  std::size_t i = value.find(';');
  *type = std::string(trim(value.substr(0, i)));
  while (i != std::string_view::npos && i < value.size()) {
    ++i;  // past ';'
    std::size_t eq = value.find('=', i);
    std::size_t semi = value.find(';', i);
    if (eq == std::string_view::npos || (semi != std::string_view::npos && semi < eq)) {
      i = semi;  // a parameter without '=': ignored
      continue;
    }
    std::string name(trim(value.substr(i, eq - i)));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::size_t j = eq + 1;
    while (j < value.size() && (value[j] == ' ' || value[j] == '\t')) ++j;
    std::string v;
    if (j < value.size() && value[j] == '"') {
      ++j;
      bool closed = false;
      for (; j < value.size(); ++j) {
        if (value[j] == '\\' && j + 1 < value.size()) {
          v += value[++j];
        } else if (value[j] == '"') {
          closed = true;
          ++j;
          break;
        } else {
          v += value[j];
        }
      }
      if (!closed) return false;
      i = value.find(';', j);
    } else {
      semi = value.find(';', j);
      v = std::string(trim(value.substr(j, semi == std::string_view::npos ? semi : semi - j)));
      i = semi;
    }
    params->emplace_back(std::move(name), std::move(v));
  }
  return true;
}

const std::string* param(const std::vector<std::pair<std::string, std::string>>& params,
                         std::string_view name) {
  for (const auto& [k, v] : params)
    if (k == name) return &v;
  return nullptr;
}

std::string part_label(std::size_t index, std::string_view name) {
  std::string s = "part " + std::to_string(index + 1);
  if (!name.empty()) s += " ('" + std::string(name) + "')";
  return s;
}

// Reads a part's header block (lines without the final blank line) into `part`.
Status parse_part_headers(std::string_view block, std::size_t index, MultipartPart* part) {
  bool has_disposition = false;
  while (!block.empty()) {
    std::size_t eol = block.find("\r\n");
    std::string_view line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view() : block.substr(eol + 2);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return invalid_argument("multipart " + part_label(index, {}) + " has a malformed header line");
    std::string_view hname = trim(line.substr(0, colon));
    std::string_view hvalue = trim(line.substr(colon + 1));
    if (iequals(hname, "Content-Type")) {
      part->content_type = std::string(hvalue);
    } else if (iequals(hname, "Content-Disposition")) {
      std::string type;
      std::vector<std::pair<std::string, std::string>> params;
      if (!split_params(hvalue, &type, &params))
        return invalid_argument("multipart " + part_label(index, {}) +
                                " has an unterminated quoted string in Content-Disposition");
      if (!iequals(type, "form-data"))
        return invalid_argument("multipart " + part_label(index, {}) +
                                " has Content-Disposition '" + type + "', expected 'form-data'");
      const std::string* name = param(params, "name");
      if (!name || name->empty())
        return invalid_argument("multipart " + part_label(index, {}) + " has no field name in Content-Disposition");
      part->name = *name;
      if (const std::string* filename = param(params, "filename")) {
        part->is_file = true;
        part->filename = *filename;
      }
      has_disposition = true;
    }
    // Other part headers (Content-Transfer-Encoding is deprecated by RFC 7578) are ignored.
  }
  if (!has_disposition)
    return invalid_argument("multipart " + part_label(index, {}) + " has no Content-Disposition header");
  return Status();
}

}  // namespace

const MultipartPart* MultipartForm::find(std::string_view name) const {
  for (const MultipartPart& p : parts)
    if (p.name == name) return &p;
  return nullptr;
}

Result<std::string> multipart_boundary(std::string_view content_type) {
  std::string type;
  std::vector<std::pair<std::string, std::string>> params;
  if (!split_params(content_type, &type, &params))
    return invalid_argument("Content-Type has an unterminated quoted string");
  if (!iequals(type, "multipart/form-data"))
    return invalid_argument("Content-Type must be multipart/form-data, got '" + type + "'");
  const std::string* b = param(params, "boundary");
  if (!b || b->empty()) return invalid_argument("multipart/form-data Content-Type has no boundary parameter");
  // RFC 2046: 1 to 70 characters, not ending in a space.
  if (b->size() > 70 || b->back() == ' ')
    return invalid_argument("multipart boundary must be 1 to 70 characters, not ending in a space");
  return *b;
}

Result<MultipartForm> parse_multipart(std::string_view content_type, std::string_view body,
                                      std::size_t max_parts) {
  PRISM_ASSIGN_OR_RETURN(const std::string boundary, multipart_boundary(content_type));
  const std::string dash_boundary = "--" + boundary;
  const std::string delimiter = "\r\n" + dash_boundary;

  // The first boundary line starts the body or follows a preamble and a CRLF.
  std::size_t pos;
  if (body.substr(0, dash_boundary.size()) == dash_boundary) {
    pos = 0;
  } else {
    pos = body.find(delimiter);
    if (pos == std::string_view::npos)
      return invalid_argument("multipart body does not contain the boundary '" + dash_boundary + "'");
    pos += 2;
  }

  MultipartForm form;
  for (std::size_t index = 0;; ++index) {
    std::size_t p = pos + dash_boundary.size();
    if (body.substr(p, 2) == "--") break;  // close delimiter: the rest is epilogue
    while (p < body.size() && (body[p] == ' ' || body[p] == '\t')) ++p;  // transport padding
    if (body.substr(p, 2) != "\r\n") {
      if (p >= body.size()) return invalid_argument("multipart body is truncated: it ends after a boundary line");
      return invalid_argument("multipart boundary line before " + part_label(index, {}) +
                              " is not followed by CRLF");
    }
    p += 2;
    if (form.parts.size() == max_parts)
      return invalid_argument("multipart body has more than " + std::to_string(max_parts) + " parts");

    MultipartPart part;
    std::size_t content_begin;
    if (body.substr(p, 2) == "\r\n") {
      content_begin = p + 2;  // no headers at all: caught below (no Content-Disposition)
      PRISM_RETURN_IF_ERROR(parse_part_headers({}, index, &part));
    } else {
      std::size_t end = body.find("\r\n\r\n", p);
      if (end == std::string_view::npos)
        return invalid_argument("multipart body is truncated: the headers of " + part_label(index, {}) +
                                " never end");
      PRISM_RETURN_IF_ERROR(parse_part_headers(body.substr(p, end - p), index, &part));
      content_begin = end + 4;
    }
    std::size_t content_end = body.find(delimiter, content_begin);
    if (content_end == std::string_view::npos)
      return invalid_argument("multipart body is truncated: " + part_label(index, part.name) +
                              " has no closing boundary");
    part.data = std::string(body.substr(content_begin, content_end - content_begin));
    form.parts.push_back(std::move(part));
    pos = content_end + 2;
  }
  return form;
}

}  // namespace prism::api

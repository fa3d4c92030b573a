// app/embed_input.cpp: streaming .jsonl / .txt / .csv readers over one buffered file cursor.
// NOTE: position_ moves only when a whole document (or a blank line that holds none) has been
// consumed, so a resume token taken from it never splits a record, and an error leaves it
// after the last good document.
#include "app/embed_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

namespace prism::app {

namespace {

constexpr size_t kBufferBytes = 1 << 20;
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

bool ends_with(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  std::string lower = s.substr(s.size() - suffix.size());
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower == suffix;
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error
// ..." → "column 7: syntax error ..." (the line is ours to name).
std::string json_problem(const std::string& what) {
  const size_t col = what.find("column ");
  if (col != std::string::npos) return what.substr(col);
  const size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

}  // namespace

Result<InputFormat> input_format_of(const std::string& path) {
  if (ends_with(path, ".jsonl") || ends_with(path, ".ndjson")) return InputFormat::jsonl;
  if (ends_with(path, ".txt")) return InputFormat::txt;
  if (ends_with(path, ".csv")) return InputFormat::csv;
  return invalid_argument("cannot tell the format of input " + path +
                          " from its extension: use .jsonl (or .ndjson), .txt or .csv");
}

struct DocumentReader::Impl {
  std::string path;
  InputFormat format = InputFormat::txt;
  InputOptions options;
  int fd = -1;
  int64_t size_bytes = 0;
  std::string buffer;
  size_t buffer_pos = 0;
  InputPosition position;  // after the last document returned
  InputPosition cursor;    // after the last byte consumed
  std::string line;        // scratch
  // .csv only
  std::vector<std::string> fields;
  size_t num_columns = 0;
  int text_column = -1, id_column = -1;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  Status error_at(int64_t line_number, const std::string& problem) const {
    return invalid_argument(path + ":" + std::to_string(line_number) + ": " + problem);
  }

  Result<bool> fill() {
    buffer.resize(kBufferBytes);
    for (;;) {
      const ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return data_loss("cannot read " + path + ": " + std::strerror(errno));
      buffer.resize(static_cast<size_t>(n));
      buffer_pos = 0;
      return n > 0;
    }
  }

  Status seek(int64_t offset) {
    if (::lseek(fd, offset, SEEK_SET) < 0) return data_loss("cannot seek in " + path + ": " + std::strerror(errno));
    buffer.clear();
    buffer_pos = 0;
    cursor.offset = offset;
    return {};
  }

  // One physical line into `out`, its terminator ('\n', and a '\r' before it) dropped.
  // false at the end of the file. Advances cursor (offset, line), not position.
  Result<bool> read_line(std::string& out) {
    out.clear();
    bool any = false;
    for (;;) {
      if (buffer_pos == buffer.size()) {
        PRISM_ASSIGN_OR_RETURN(bool more, fill());
        if (!more) {
          if (!any) return false;
          ++cursor.line;  // a last line without '\n'
          if (!out.empty() && out.back() == '\r') out.pop_back();
          return true;
        }
      }
      any = true;
      const char* begin = buffer.data() + buffer_pos;
      const size_t avail = buffer.size() - buffer_pos;
      const void* nl = std::memchr(begin, '\n', avail);
      const size_t take = nl ? static_cast<size_t>(static_cast<const char*>(nl) - begin) : avail;
      out.append(begin, take);
      buffer_pos += take + (nl ? 1 : 0);
      cursor.offset += static_cast<int64_t>(take + (nl ? 1 : 0));
      if (static_cast<int64_t>(out.size()) > options.max_document_bytes)
        return error_at(cursor.line + 1, "a line longer than " + std::to_string(options.max_document_bytes) +
                                             " bytes: is this really a " + format_name() + " file?");
      if (nl) {
        ++cursor.line;
        if (!out.empty() && out.back() == '\r') out.pop_back();
        return true;
      }
    }
  }

  std::string format_name() const {
    switch (format) {
      case InputFormat::jsonl:
        return "JSON Lines";
      case InputFormat::txt:
        return "text";
      case InputFormat::csv:
        return "CSV";
    }
    return "";
  }

  void skip_bom() {
    if (buffer.empty()) (void)fill();
    if (std::string_view(buffer).substr(0, kUtf8Bom.size()) == kUtf8Bom) {
      buffer_pos = kUtf8Bom.size();
      cursor.offset = static_cast<int64_t>(kUtf8Bom.size());
    }
  }

  Result<bool> next_txt(InputDocument& doc) {
    PRISM_ASSIGN_OR_RETURN(bool got, read_line(line));
    if (!got) return false;
    doc.text.swap(line);
    doc.id = std::to_string(cursor.record++);
    doc.line = cursor.line;
    position = cursor;
    return true;
  }

  Result<bool> next_jsonl(InputDocument& doc) {
    for (;;) {
      PRISM_ASSIGN_OR_RETURN(bool got, read_line(line));
      if (!got) return false;
      const int64_t record = cursor.record++;
      if (is_blank(line)) {
        position = cursor;
        continue;
      }
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        return error_at(cursor.line, "invalid JSON: " + json_problem(e.what()));
      }
      doc.line = cursor.line;
      if (j.is_string()) {
        doc.text = j.get<std::string>();
        doc.id = std::to_string(record);
      } else if (j.is_object()) {
        const auto text = j.find(options.text_field);
        if (text == j.end() || !text->is_string())
          return error_at(cursor.line,
                          "no string field \"" + options.text_field + "\" (name the text field with --text-field)");
        doc.text = text->get<std::string>();
        const auto id = j.find(options.id_field);
        if (id == j.end() || id->is_null())
          doc.id = std::to_string(record);
        else if (id->is_string())
          doc.id = id->get<std::string>();
        else if (id->is_number_integer())
          doc.id = id->dump();
        else
          return error_at(cursor.line, "field \"" + options.id_field + "\" must be a string or an integer");
      } else {
        return error_at(cursor.line, "expected a JSON object or string, got " + std::string(j.type_name()));
      }
      position = cursor;
      return true;
    }
  }

  // One RFC 4180 record into `fields`; false at the end. Blank lines are skipped. first_line:
  // where the record starts.
  Result<bool> read_csv_record(int64_t& first_line) {
    do {
      PRISM_ASSIGN_OR_RETURN(bool got, read_line(line));
      if (!got) return false;
    } while (line.empty());
    first_line = cursor.line;
    fields.clear();
    fields.emplace_back();
    bool quoted = false;       // inside a quoted field
    bool after_quote = false;  // just after a quoted field's closing quote
    size_t record_bytes = 0;
    for (;;) {
      for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
          if (c != '"')
            fields.back().push_back(c);
          else if (i + 1 < line.size() && line[i + 1] == '"')
            fields.back().push_back('"'), ++i;
          else
            quoted = false, after_quote = true;
        } else if (c == ',') {
          fields.emplace_back();
          after_quote = false;
        } else if (after_quote) {
          return error_at(cursor.line, std::string("unexpected '") + c +
                                           "' after a closing quote (inside a quoted field write a quote as \"\")");
        } else if (c == '"' && fields.back().empty()) {
          quoted = true;
        } else {
          fields.back().push_back(c);  // a quote inside an unquoted field is kept as is
        }
      }
      if (!quoted) return true;
      record_bytes += line.size() + 1;
      if (static_cast<int64_t>(record_bytes) > options.max_document_bytes)
        return error_at(first_line, "a record longer than " + std::to_string(options.max_document_bytes) + " bytes");
      fields.back().push_back('\n');  // the newline is part of the quoted field
      PRISM_ASSIGN_OR_RETURN(bool more, read_line(line));
      if (!more) return error_at(first_line, "a quoted field that starts here is never closed");
    }
  }

  Status read_csv_header() {
    int64_t first_line = 0;
    PRISM_ASSIGN_OR_RETURN(bool got, read_csv_record(first_line));
    if (!got) return invalid_argument(path + ": empty CSV file (it needs a header row naming the columns)");
    num_columns = fields.size();
    std::string names;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (text_column < 0 && fields[i] == options.text_field) text_column = static_cast<int>(i);
      if (id_column < 0 && fields[i] == options.id_field) id_column = static_cast<int>(i);
      names += (i ? ", " : "") + fields[i];
    }
    if (text_column < 0)
      return error_at(first_line, "the header has no column \"" + options.text_field + "\" (columns: " + names +
                                      "); name the text column with --text-field");
    position = cursor;
    return {};
  }

  Result<bool> next_csv(InputDocument& doc) {
    int64_t first_line = 0;
    PRISM_ASSIGN_OR_RETURN(bool got, read_csv_record(first_line));
    if (!got) return false;
    if (fields.size() != num_columns)
      return error_at(first_line,
                      std::to_string(fields.size()) + " fields, but the header has " + std::to_string(num_columns));
    doc.text.swap(fields[static_cast<size_t>(text_column)]);
    const int64_t record = cursor.record++;
    doc.id = id_column >= 0 ? fields[static_cast<size_t>(id_column)] : std::to_string(record);
    doc.line = first_line;
    position = cursor;
    return true;
  }
};

DocumentReader::DocumentReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DocumentReader::~DocumentReader() = default;

Result<std::unique_ptr<DocumentReader>> DocumentReader::open(const std::string& path, InputFormat format,
                                                             const InputOptions& options, const InputPosition& start) {
  auto m = std::make_unique<Impl>();
  m->path = path;
  m->format = format;
  m->options = options;
  m->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (m->fd < 0) return not_found("cannot open input " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(m->fd, &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument("input " + path + " is not a regular file (a resumable job seeks in its input)");
  m->size_bytes = static_cast<int64_t>(st.st_size);
  if (start.offset < 0 || start.offset > m->size_bytes)
    return invalid_argument("input " + path + " has " + std::to_string(m->size_bytes) +
                            " bytes, but the job resumes at byte " + std::to_string(start.offset) +
                            ": it is not the input the job started with");
  m->skip_bom();
  m->position = m->cursor;
  if (format == InputFormat::csv) PRISM_RETURN_IF_ERROR(m->read_csv_header());
  if (start.offset > 0) {
    if (start.offset < m->position.offset)
      return invalid_argument("the job resumes at byte " + std::to_string(start.offset) + " of " + path +
                              ", inside its CSV header");
    PRISM_RETURN_IF_ERROR(m->seek(start.offset));
    m->cursor = start;
    m->position = start;
  }
  return std::unique_ptr<DocumentReader>(new DocumentReader(std::move(m)));
}

Result<bool> DocumentReader::next(InputDocument& doc) {
  switch (impl_->format) {
    case InputFormat::jsonl:
      return impl_->next_jsonl(doc);
    case InputFormat::txt:
      return impl_->next_txt(doc);
    case InputFormat::csv:
      return impl_->next_csv(doc);
  }
  return false;
}

const InputPosition& DocumentReader::position() const { return impl_->position; }
int64_t DocumentReader::size_bytes() const { return impl_->size_bytes; }
const std::string& DocumentReader::path() const { return impl_->path; }

}  // namespace prism::app

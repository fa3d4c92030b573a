// app/embed_input.h: the documents of a bulk embedding job, read one at a time from a file so
// memory does not grow with the input, each reported with the byte offset just after it: a
// resumed job seeks straight there.
//   .jsonl/.ndjson  one JSON value per line: an object with a string text field (--text-field,
//                   default "text") and an optional id field (--id-field, default "id"; a
//                   string or an integer), or a bare JSON string. Blank lines hold no document.
//   .txt            one document per line (a trailing '\r' is dropped). Every line is a
//                   document, blank ones included (empty documents: see EmbedOptions).
//   .csv            RFC 4180: a header row naming the columns; fields separated by ',';
//                   quoted fields may hold ',', newlines and "" (one quote). Blank lines are
//                   skipped, as Python's csv module does. A record with another field count
//                   than the header is an error.
// Default ids (no id field or column): the 0-based line number (.txt, .jsonl) or data-record
// number (.csv, header excluded), so the ids of a file do not depend on where a run resumed.
// A UTF-8 byte-order mark at the start of the file is ignored. Errors name FILE:LINE.
// Must not: tokenize, or judge document contents (empty texts are the caller's policy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace prism::app {

enum class InputFormat { jsonl, txt, csv };
// From the file name's extension; invalid_argument listing the known ones otherwise.
Result<InputFormat> input_format_of(const std::string& path);

struct InputOptions {
  std::string text_field = "text";          // .jsonl key / .csv column of the text
  std::string id_field = "id";              // .jsonl key / .csv column of the id; absent: default ids
  int64_t max_document_bytes = 64ll << 20;  // a longer line or record is an error
};

// Where a reader stands: just after a document, or the start of the input.
struct InputPosition {
  int64_t offset = 0;  // bytes of the file consumed
  int64_t line = 0;    // lines consumed (the next document starts on line + 1)
  int64_t record = 0;  // documents, blank .jsonl lines and .txt lines consumed: the next default id
};

struct InputDocument {
  std::string id;
  std::string text;
  int64_t line = 0;  // 1-based line where the document starts, for messages
};

class DocumentReader {
 public:
  // Opens the file and, for .csv, reads its header; then starts at `start` (a position a
  // previous reader of the same file returned). invalid_argument when start is past the end.
  static Result<std::unique_ptr<DocumentReader>> open(const std::string& path, InputFormat format,
                                                      const InputOptions& options, const InputPosition& start = {});
  ~DocumentReader();

  // The next document: true; false at the end of the input; invalid_argument naming
  // FILE:LINE for malformed input (position() then stays after the last good document).
  Result<bool> next(InputDocument& doc);
  // After the last document next() returned (or the start).
  const InputPosition& position() const;
  int64_t size_bytes() const;  // of the whole file
  const std::string& path() const;

 private:
  struct Impl;
  explicit DocumentReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::app

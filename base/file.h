// Reading a whole small file into memory (configs, tokenizer files, templates) and writing
// one (reports, generated checkpoints' JSON). Not for weights (formats/ memory-maps those).
#pragma once

#include <string>

#include "base/status.h"

namespace prism {

// The file's bytes; not_found when it cannot be opened, data_loss when reading fails. Both
// messages name the path.
Result<std::string> read_file(const std::string& path);
// Replaces the file with `content`; internal_error naming the path when it cannot.
Status write_file(const std::string& path, const std::string& content);

}  // namespace prism

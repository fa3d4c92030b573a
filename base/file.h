// Reading a whole file into memory: configs, tokenizer files, templates. Not for weights
// (formats/ memory-maps those).
#pragma once

#include <string>

#include "base/status.h"

namespace prism {

// The file's bytes; not_found when it cannot be opened, data_loss when reading fails. Both
// messages name the path.
Result<std::string> read_file(const std::string& path);

}  // namespace prism

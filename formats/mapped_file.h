// formats/mapped_file.h: a read-only private mapping of a whole checkpoint file, unmapped when
// its last user goes (the zero-copy Tensors of safetensors.h and pytorch_checkpoint.h hold it).
// NOTE: a file truncated by someone else after open() raises SIGBUS on access; weights are not
// expected to change under a running server.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"

namespace prism::formats {

struct MappedFile {
  void* addr = nullptr;  // null for an empty file
  size_t size = 0;
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
};

// not_found when the file does not exist; invalid_argument when it cannot be opened or is not a
// regular file; resource_exhausted when the mapping fails. Messages name the path.
Result<std::shared_ptr<MappedFile>> map_file(const std::string& path);

}  // namespace prism::formats

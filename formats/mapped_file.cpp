#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace prism::formats {

MappedFile::~MappedFile() {
  if (addr != nullptr) munmap(addr, size);
}

Result<std::shared_ptr<MappedFile>> map_file(const std::string& path) {
  const std::string quoted = "'" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "cannot open " + quoted + ": " + std::strerror(err);
    return err == ENOENT ? not_found(msg) : invalid_argument(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const std::string msg = "cannot stat " + quoted + ": " + std::strerror(errno);
    ::close(fd);
    return invalid_argument(msg);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(quoted + " is not a regular file");
  }
  auto mapping = std::make_shared<MappedFile>();
  mapping->size = size_t(st.st_size);
  if (mapping->size > 0) {
    void* p = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string msg = "cannot mmap " + quoted + ": " + std::strerror(errno);
      ::close(fd);
      return resource_exhausted(msg);
    }
    mapping->addr = p;
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return mapping;
}

}  // namespace prism::formats

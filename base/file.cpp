// read_file: one way to slurp a small file.
#include "base/file.h"

#include <fstream>
#include <sstream>

namespace prism {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return data_loss("cannot read '" + path + "'");
  return ss.str();
}

}  // namespace prism

// read_file / write_file: one way to slurp or write a small file.
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

Status write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) return internal_error("cannot write '" + path + "'");
  return {};
}

}  // namespace prism

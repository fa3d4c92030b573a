#include "test_util/paths.h"

#include <array>
#include <cstdio>
#include <filesystem>

#include <unistd.h>

namespace prism::test {

std::string testdata_dir() { return PRISM_TESTDATA_DIR; }
std::string reference_dir() { return PRISM_REFERENCE_DIR; }
std::string python() { return PRISM_PYTHON; }

std::string scratch_dir(const std::string& name) {
  namespace fs = std::filesystem;
  // NOTE: per process: ctest runs the tests of one executable as parallel processes.
  const fs::path dir = fs::path(PRISM_TEST_TMPDIR) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

Status run_reference(const std::string& script, const std::string& args) {
  const std::string cmd = python() + " " + reference_dir() + "/" + script + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return internal_error("cannot start: " + cmd);
  std::string output;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  const int rc = pclose(pipe);
  if (rc != 0) return internal_error("'" + cmd + "' failed (" + std::to_string(rc) + "):\n" + output);
  return Status();
}

}  // namespace prism::test

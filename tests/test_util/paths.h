// Where tests find things: ../shared/testdata, the Python reference generators, a scratch dir.
#pragma once

#include <string>

#include "base/status.h"

namespace prism::test {

std::string testdata_dir();   // ../shared/testdata (real data; never copied into the repo)
std::string reference_dir();  // tests/reference (PyTorch generators)
std::string python();         // /usr/bin/python3: Debian's, which sees python3-torch
// A fresh, empty directory under the build tree for this test's files (one per process).
std::string scratch_dir(const std::string& name);
// Runs `python() <reference_dir()>/<script> <args>`; an error carries the script's output.
Status run_reference(const std::string& script, const std::string& args);

}  // namespace prism::test

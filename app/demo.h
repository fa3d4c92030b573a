// app/demo.h: `prism demo init [DIR]` and where the demo set lives when no directory is given.
// The set itself (its models, their writers, its prism.toml) is tools/demo/'s: this file only
// picks the directory from the environment and reports on the terminal.
#pragma once

#include <string>

namespace prism::app {

// $XDG_CACHE_HOME/prism/demo, else $HOME/.cache/prism/demo, else ./demo-models.
std::string default_demo_dir();

int run_demo_init(const std::string& dir);  // prism demo init [DIR]

}  // namespace prism::app

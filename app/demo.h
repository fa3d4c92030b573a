// app/demo.h: `prism demo init [DIR]` and where the demo set lives when no directory is given.
// The set itself (its models, their writers, its prism.toml) is tools/demo/'s: this file only
// picks the directory from the environment and reports on the terminal.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "serving/config.h"

namespace prism::app {

// $XDG_CACHE_HOME/prism/demo, else $HOME/.cache/prism/demo, else ./demo-models.
std::string default_demo_dir();

int run_demo_init(const std::string& dir);  // prism demo init [DIR]

// The demo set's deployment `name` (written into demo_dir, default_demo_dir() when empty, if
// missing), for commands run without --model. not_found when this build's set has none: "no
// --model given, and this build's demo set has no <what> (<name>): pass --model DIR, <hint>".
Result<serving::DeploymentConfig> demo_deployment(const std::string& demo_dir, std::string_view name,
                                                  std::string_view what, std::string_view hint);

}  // namespace prism::app

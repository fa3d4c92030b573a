// Entry points of the prism subcommands; each returns the process exit code.
#pragma once

namespace prism::app {

int run_info();  // prism info

}  // namespace prism::app

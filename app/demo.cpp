// app/demo.cpp: `prism demo init` and the default demo directory, around tools/demo/'s writers.
#include "app/demo.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "serving/config.h"
#include "tools/demo/demo.h"

namespace prism::app {

namespace fs = std::filesystem;

std::string default_demo_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return (fs::path(xdg) / "prism" / "demo").string();
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0')
    return (fs::path(home) / ".cache" / "prism" / "demo").string();
  return "demo-models";
}

int run_demo_init(const std::string& dir_arg) {
  const std::string dir = dir_arg.empty() ? default_demo_dir() : dir_arg;
  bool created = false;
  Result<std::string> config = tools::demo::ensure_demo(dir, &created);
  if (!config.has_value()) {
    std::fprintf(stderr, "prism demo init: %s\n", config.status().message().c_str());
    return 1;
  }
  std::printf(created ? "wrote the demo set in %s:\n" : "the demo set in %s is complete:\n", dir.c_str());
  for (const tools::demo::DemoModel& m : tools::demo::demo_models())
    std::printf("  %-12s task %s\n", m.name, m.task);
  std::printf("serve it with: prism serve --config %s\n", config.value().c_str());
  std::printf("demo weights are random: their outputs are meaningless.\n");
  return 0;
}

Result<serving::DeploymentConfig> demo_deployment(const std::string& demo_dir, std::string_view name,
                                                  std::string_view what, std::string_view hint) {
  const auto models = tools::demo::demo_models();
  if (std::none_of(models.begin(), models.end(), [&](const tools::demo::DemoModel& m) { return m.name == name; }))
    return not_found("no --model given, and this build's demo set has no " + std::string(what) + " (" +
                     std::string(name) + "): pass --model DIR, " + std::string(hint));
  const std::string dir = demo_dir.empty() ? default_demo_dir() : demo_dir;
  PRISM_ASSIGN_OR_RETURN(const std::string path, tools::demo::ensure_demo(dir));
  PRISM_ASSIGN_OR_RETURN(const serving::Config config, serving::load_config(path));
  for (const serving::DeploymentConfig& d : config.deployments)
    if (d.name == name) return d;
  return not_found(path + " declares no deployment '" + std::string(name) + "'");
}

}  // namespace prism::app

// app/demo.h: the demo set, Prism's embedded default. `prism demo init [DIR]` writes one small
// synthetic checkpoint per supported family (random weights, fixed seed, the family's real
// config keys and tensor names) plus a prism.toml with one [[deployment]] each; `prism serve`
// without a config creates what is missing and serves it. Demo outputs are meaningless.
// A model family adds its demo with one entry in demo_models() (app/demo.cpp).
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "base/status.h"

namespace prism::app {

struct DemoModel {
  const char* name;  // the deployment name and the folder under the demo directory
  const char* task;  // a serving task ("echo", "embed", ...)
  // Writes the checkpoint (config.json, *.safetensors, tokenizer files) into an empty folder.
  Status (*write)(const std::filesystem::path& dir);
  const char* toml_extra;  // extra lines of its [[deployment]] table (knobs, batching), or ""
};

std::span<const DemoModel> demo_models();

// $XDG_CACHE_HOME/prism/demo, else $HOME/.cache/prism/demo, else ./demo-models.
std::string default_demo_dir();

// Writes every demo model missing under dir and, when one was written or the file is missing,
// dir/prism.toml. Returns the path of prism.toml. `created`: set to whether anything was written.
Result<std::string> ensure_demo(const std::string& dir, bool* created = nullptr);

int run_demo_init(const std::string& dir);  // prism demo init [DIR]

}  // namespace prism::app

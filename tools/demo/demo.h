// tools/demo/demo.h: the demo set, Prism's embedded default: one small synthetic checkpoint
// per supported family (random weights, fixed seed, the family's real config keys and tensor
// names) plus a prism.toml with one [[deployment]] each. `prism demo init [DIR]` writes it and
// `prism serve` without a config creates what is missing and serves it (app/ calls both).
// Demo outputs are meaningless. A model family adds its demo with one entry in demo_models()
// (tools/demo/demo.cpp). Writes files only: it loads no model, serves nothing, prints nothing
// and reads no environment (where the set lives is the caller's to say).
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "base/status.h"

namespace prism::tools::demo {

struct DemoModel {
  const char* name;  // the deployment name and the folder under the demo directory
  const char* task;  // a serving task ("echo", "embed", ...)
  // Writes the checkpoint (config.json, *.safetensors, tokenizer files) into an empty folder.
  Status (*write)(const std::filesystem::path& dir);
  const char* toml_extra;  // extra lines of its [[deployment]] table (knobs, batching), or ""
};

std::span<const DemoModel> demo_models();

// Writes every demo model missing under dir and, when one was written or the file is missing,
// dir/prism.toml. Returns the path of prism.toml. `created`: set to whether anything was written.
Result<std::string> ensure_demo(const std::string& dir, bool* created = nullptr);

}  // namespace prism::tools::demo

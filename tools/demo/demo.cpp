// tools/demo/demo.cpp: writing the demo set. Each model is written into a temporary folder
// renamed into place at the end, so a folder that exists is complete (an interrupted write is
// redone).
#include "tools/demo/demo.h"

#include <fstream>
#include <system_error>

#include "tools/demo/demo_asr.h"
#include "tools/demo/demo_chat.h"
#include "tools/demo/demo_clip.h"
#include "tools/demo/demo_embed.h"
#include "tools/demo/demo_image.h"
#include "tools/demo/demo_vlm.h"

namespace prism::tools::demo {

namespace fs = std::filesystem;

namespace {

// The echo test engine has no weights: its folder only says what it is.
Status write_echo(const fs::path& dir) {
  std::ofstream out(dir / "README.txt");
  out << "Prism demo deployment 'echo': the echo test engine. It has no weights; it answers\n"
         "POST /v1/prism/echo with its input.\n";
  if (!out) return internal_error("cannot write " + (dir / "README.txt").string());
  return {};
}

// One entry per family with a demo. Families add theirs here (name, task, writer, extra TOML).
constexpr DemoModel kDemoModels[] = {
    {"echo", "echo", write_echo, ""},
    {"demo-embed", "embed", write_demo_embed, ""},
    {"demo-chat", "chat", write_demo_chat, kDemoChatToml},
    {"demo-vlm", "chat", write_demo_vlm, kDemoVlmToml},
    {"demo-clip", "embed", write_demo_clip, ""},
    {"demo-asr", "transcribe", write_demo_asr, kDemoAsrToml},
    {"demo-image", "image", write_demo_image, kDemoImageToml},
};

// TOML basic string: quotes and backslashes escaped (paths may hold either).
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

Status write_model(const DemoModel& m, const fs::path& dir) {
  const fs::path tmp = dir / (std::string(".tmp-") + m.name);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return internal_error("cannot create " + tmp.string() + ": " + ec.message());
  PRISM_RETURN_IF_ERROR(m.write(tmp));
  fs::rename(tmp, dir / m.name, ec);
  if (ec) return internal_error("cannot move " + tmp.string() + " into place: " + ec.message());
  return {};
}

Status write_config(const fs::path& dir) {
  const fs::path path = dir / "prism.toml";
  const fs::path tmp = dir / "prism.toml.tmp";
  {
    std::ofstream out(tmp);
    out << "# Prism demo deployments, written by `prism demo init`. Rewritten when a demo model is\n"
           "# added: copy this file elsewhere to edit it. Demo weights are random (fixed seed):\n"
           "# their outputs are meaningless. For real models, point a [[deployment]]'s `model` at a\n"
           "# Hugging Face checkpoint directory and run `prism serve --config FILE`.\n\n"
           "[server]\nhost = \"127.0.0.1\"\nport = 8080\n";
    for (const DemoModel& m : demo_models()) {
      out << "\n[[deployment]]\nname = " << toml_string(m.name) << "\ntask = " << toml_string(m.task)
          << "\nmodel = " << toml_string((dir / m.name).string()) << "\n" << m.toml_extra;
    }
    if (!out) return internal_error("cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return internal_error("cannot write " + path.string() + ": " + ec.message());
  return {};
}

}  // namespace

std::span<const DemoModel> demo_models() { return kDemoModels; }

Result<std::string> ensure_demo(const std::string& dir_text, bool* created) {
  std::error_code ec;
  const fs::path dir = fs::absolute(dir_text, ec);
  if (ec) return internal_error("bad demo directory " + dir_text + ": " + ec.message());
  fs::create_directories(dir, ec);
  if (ec) return internal_error("cannot create the demo directory " + dir.string() + ": " + ec.message());
  bool wrote = false;
  for (const DemoModel& m : demo_models()) {
    if (fs::is_directory(dir / m.name)) continue;
    PRISM_RETURN_IF_ERROR(write_model(m, dir));
    wrote = true;
  }
  const fs::path config = dir / "prism.toml";
  if (wrote || !fs::exists(config)) {
    PRISM_RETURN_IF_ERROR(write_config(dir));
    wrote = true;
  }
  if (created != nullptr) *created = wrote;
  return config.string();
}

}  // namespace prism::tools::demo

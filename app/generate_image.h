// app/generate_image.h: `prism generate-image`, text-to-image in-process:
//   prism generate-image "PROMPT" [--model DIR] [-o out.png] [--size WxH] [-n N] [--steps N]
//     [--guidance-scale G] [--negative-prompt TEXT] [--seed S] [--sampler euler|unipc]
//     [--shift S] [--cfg-interval START,STOP] [--precision f32|bf16|int8] [--no-progress]
// The same path as the server's /v1/images/generations: a DeploymentSet holding one "image"
// deployment of DIR (default: the demo set's demo-image), its ImageFrontend for the prompt and
// the request's defaults and limits, the engine's step loop. Images go to --output (format by
// extension: .png, .jpg / .jpeg, .webp; with -n > 1, NAME-0.png, NAME-1.png, ...); a progress
// bar over steps and the seed used go to stderr.
// Exit codes: 0 done; 1 bad model, option or a failed generation (one line says why).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace prism::app {

struct GenerateImageOptions {
  std::string prompt;
  std::string model;  // diffusers directory; empty: the demo set's demo-image
  std::string output = "image.png";
  std::string size;   // "WxH"; empty: the model's default
  int n = 1;
  int steps = 0;                         // 0: the model's default
  std::optional<double> guidance_scale;  // unset: the model's default
  std::string negative_prompt;
  std::optional<uint64_t> seed;  // unset: drawn, and printed
  std::string sampler = "euler";
  double shift = 0;              // 0: the scheduler's
  std::string cfg_interval;      // "START,STOP"; empty: [0, 1]
  std::string precision = "f32";
  bool progress = true;
  std::string demo_dir;  // where the demo set lives (tests); empty: default_demo_dir()
};

CLI::App* add_generate_image_command(CLI::App& app, GenerateImageOptions& options);
int run_generate_image(const GenerateImageOptions& options);

}  // namespace prism::app

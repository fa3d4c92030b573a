// app/generate_image.cpp: `prism generate-image`: the request the images route would queue,
// built from flags over the model's defaults, run by an in-process "image" deployment; a step
// bar while it runs; the images written by the output's extension.
#include "app/generate_image.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>

#include "app/demo.h"
#include "app/engines.h"
#include "app/progress.h"
#include "frontends/image_frontend.h"
#include "frontends/image_payload.h"
#include "media/image.h"
#include "serving/deployment_set.h"
#include "serving/metrics.h"

namespace prism::app {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDemoImage = "demo-image";

int fail(const std::string& message) {
  std::fprintf(stderr, "prism generate-image: %s\n", message.c_str());
  return 1;
}

Result<serving::DeploymentConfig> image_deployment(const GenerateImageOptions& o) {
  serving::DeploymentConfig d;
  if (o.model.empty()) {
    PRISM_ASSIGN_OR_RETURN(d, demo_deployment(o.demo_dir, kDemoImage, "image model",
                                              "a diffusers directory (Z-Image)"));
  } else {
    if (!fs::is_directory(o.model)) return not_found("no such model directory '" + o.model + "'");
    d.name = "image";
    d.task = "image";
    d.model = o.model;
  }
  d.precision = o.precision;
  d.timeout_ms = 0;  // a command waits as long as the image takes
  return d;
}

// The request's parameters: the flags over the frontend's defaults, checked as the route checks them.
Result<frontends::ImageParams> image_params(const GenerateImageOptions& o, const frontends::ImageFrontend& fe) {
  frontends::ImageParams p = fe.defaults();
  if (!o.size.empty()) {
    int w = 0, h = 0;
    char x = 0, rest = 0;
    if (std::sscanf(o.size.c_str(), "%d%c%d%c", &w, &x, &h, &rest) != 3 || x != 'x')
      return invalid_argument("--size must be WIDTHxHEIGHT, such as 1024x768 (got '" + o.size + "')");
    p.width = w;
    p.height = h;
  }
  if (Status s = fe.check_size(p.width, p.height); !s.ok()) return invalid_argument("--size " + s.message());
  if (o.n < 1 || o.n > fe.max_images())
    return invalid_argument("-n must be in [1, " + std::to_string(fe.max_images()) + "] for this model");
  p.n = o.n;
  if (o.steps != 0) p.steps = o.steps;
  if (p.steps < 1 || p.steps > 1000) return invalid_argument("--steps must be in [1, 1000]");
  if (o.guidance_scale) p.guidance_scale = float(*o.guidance_scale);
  p.sampler = o.sampler == "unipc" ? frontends::Sampler::unipc : frontends::Sampler::euler;
  p.shift = float(o.shift);
  if (!o.cfg_interval.empty()) {
    double start = 0, stop = 1;
    char comma = 0, rest = 0;
    if (std::sscanf(o.cfg_interval.c_str(), "%lf%c%lf%c", &start, &comma, &stop, &rest) != 3 || comma != ',' ||
        start < 0 || stop > 1 || start > stop)
      return invalid_argument("--cfg-interval must be START,STOP with 0 <= START <= STOP <= 1 (got '" +
                              o.cfg_interval + "')");
    p.cfg_start = float(start);
    p.cfg_stop = float(stop);
  }
  if (o.seed) {
    p.seed = *o.seed;
  } else {
    std::random_device rd;
    p.seed = (uint64_t(rd()) << 31 ^ rd()) & uint64_t(std::numeric_limits<int64_t>::max());
  }
  p.report_steps = true;
  return p;
}

// NAME.EXT for one image; NAME-i.EXT for image i of several.
std::string output_path(const std::string& output, int i, int n) {
  if (n == 1) return output;
  const fs::path p(output);
  return (p.parent_path() / (p.stem().string() + "-" + std::to_string(i) + p.extension().string())).string();
}

std::string extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

Status check_output(const std::string& path) {
  const std::string ext = extension(path);
  if (ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".webp") return Status();
  return invalid_argument("--output must end in .png, .jpg, .jpeg or .webp (got '" + path + "')");
}

Status write_image(const std::string& path, const media::Image& image) {
  const std::string ext = extension(path);
  const std::vector<uint8_t> bytes = ext == ".png"    ? media::encode_png(image)
                                     : ext == ".webp" ? media::encode_webp(image, 100)
                                                      : media::encode_jpeg(image, 95);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) return internal_error("cannot write " + path);
  return Status();
}

// "[#######.....] step 5/8  2.1 s/step  ETA 6s", redrawn in place on a terminal. With several
// images (which step together when they share a size) the step is the slowest image's.
class StepBar {
 public:
  StepBar(bool enabled, int steps, int images)
      : enabled_(enabled), tty_(isatty(fileno(stderr)) != 0), steps_(steps), images_(images),
        done_(size_t(images), 0), start_(std::chrono::steady_clock::now()) {}
  void update(int image, int step) {
    if (!enabled_ || image < 0 || image >= images_) return;
    done_[size_t(image)] = step;
    int done = 0;
    for (int d : done_) done += d;
    step = *std::min_element(done_.begin(), done_.end());
    const int total = steps_ * images_;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double per_step = done > 0 ? elapsed / done : 0;
    constexpr int kWidth = 24;
    const int filled = total > 0 ? kWidth * done / total : 0;
    std::string line = "[" + std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.') + "] step " +
                       std::to_string(step) + "/" + std::to_string(steps_);
    char rate[64];
    std::snprintf(rate, sizeof(rate), "  %.2f s/step", per_step);
    line += rate;
    line += "  ETA " + format_duration(per_step * (total - done));
    std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", line.c_str());
    if (tty_ && done == total) std::fputc('\n', stderr);
  }

 private:
  bool enabled_, tty_;
  int steps_, images_;
  std::vector<int> done_;  // steps taken, per image
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

CLI::App* add_generate_image_command(CLI::App& app, GenerateImageOptions& o) {
  auto* cmd = app.add_subcommand("generate-image", "Generate images from a text prompt with a diffusion model");
  cmd->add_option("PROMPT", o.prompt, "What to draw")->required();
  cmd->add_option("--model", o.model, "diffusers directory, Z-Image layout (default: the demo set's demo-image)");
  cmd->add_option("-o,--output", o.output, "Output file: .png, .jpg or .webp (default image.png)");
  cmd->add_option("--size", o.size, "WIDTHxHEIGHT in pixels (default: the model's)");
  cmd->add_option("-n", o.n, "Images, from seeds SEED, SEED + 1, ... (default 1)");
  cmd->add_option("--steps", o.steps, "Denoising steps (default: the model's)");
  cmd->add_option("--guidance-scale", o.guidance_scale, "Classifier-free guidance scale; 0 turns it off")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--negative-prompt", o.negative_prompt, "What the guidance steers away from");
  cmd->add_option("--seed", o.seed, "Seed of the initial noise (default: drawn, printed)");
  cmd->add_option("--sampler", o.sampler, "euler (default) or unipc")->check(CLI::IsMember({"euler", "unipc"}));
  cmd->add_option("--shift", o.shift, "Fixed timestep shift (default: the scheduler's)")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--cfg-interval", o.cfg_interval, "START,STOP: guidance only over these fractions of the steps");
  cmd->add_option("--precision", o.precision, "f32 (default), bf16 or int8")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}));
  cmd->add_flag("!--no-progress", o.progress, "No progress bar on stderr");
  return cmd;
}

int run_generate_image(const GenerateImageOptions& o) {
  if (Status s = check_output(o.output); !s.ok()) return fail(s.message());
  Result<serving::DeploymentConfig> config = image_deployment(o);
  if (!config.has_value()) return fail(config.status().message());
  serving::MetricsRegistry metrics;
  serving::DeploymentSet deployments(metrics);
  if (Status s = deployments.add(*config, make_engines()); !s.ok()) return fail(s.message());
  deployments.start_all();
  if (Status s = deployments.wait_ready(); !s.ok()) return fail("cannot load the model " + config->model + ": " + s.message());
  serving::Deployment* deployment = deployments.deployments().front().get();
  auto frontend = std::dynamic_pointer_cast<const frontends::ImageFrontend>(deployment->frontend());
  if (frontend == nullptr) return fail("the image deployment has no ImageFrontend");

  Result<frontends::ImageParams> params = image_params(o, *frontend);
  if (!params.has_value()) return fail(params.status().message());
  auto input = std::make_unique<frontends::ImageInput>();
  input->params = *params;
  Result<std::vector<int32_t>> prompt = frontend->prompt_tokens(o.prompt);
  if (!prompt.has_value() || prompt->empty()) return fail("the prompt has no tokens");
  input->prompt_tokens = std::move(prompt).value();
  if (params->guidance_scale > 0) {
    Result<std::vector<int32_t>> negative = frontend->prompt_tokens(o.negative_prompt);
    if (!negative.has_value() || negative->empty()) return fail("the negative prompt has no tokens");
    input->negative_tokens = std::move(negative).value();
  }
  std::fprintf(stderr, "prism generate-image: %dx%d, %d step%s, guidance %.2f, seed %llu\n", params->width,
               params->height, params->steps, params->steps == 1 ? "" : "s", params->guidance_scale,
               static_cast<unsigned long long>(params->seed));

  auto bar = std::make_shared<StepBar>(o.progress, params->steps, params->n);
  auto done = std::make_shared<std::promise<Result<serving::PayloadPtr>>>();
  std::future<Result<serving::PayloadPtr>> result = done->get_future();
  serving::RequestPtr request =
      serving::make_request(std::move(input), [done](Result<serving::PayloadPtr> r) { done->set_value(std::move(r)); });
  // Steps arrive per image; images at one size step together, so the bar follows the slowest.
  request->on_partial = [bar](serving::PayloadPtr chunk) {
    if (auto* step = dynamic_cast<frontends::ImageStep*>(chunk.get())) bar->update(step->image_index, step->step);
  };
  if (Status s = deployment->submit(request); !s.ok()) return fail(s.message());
  Result<serving::PayloadPtr> out = result.get();
  deployments.stop_all();
  if (!out.has_value()) return fail(out.status().message());
  auto* images = dynamic_cast<frontends::ImageOutput*>(out->get());
  if (images == nullptr) return fail("the image engine returned no images");
  for (size_t i = 0; i < images->images.size(); ++i) {
    const std::string path = output_path(o.output, int(i), int(images->images.size()));
    if (Status s = write_image(path, images->images[i]); !s.ok()) return fail(s.message());
    std::fprintf(stderr, "prism generate-image: wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace prism::app

// bench/image_quality_bench.cpp: the quality figure of every image-generation knob (issue 16,
// docs/image.md): for each setting, the image of the same prompt and seed against the
// full-compute one (f32, all steps, guidance on every step), as PSNR and SSIM, with the model
// passes and seconds it took.
//
//   image_quality_bench --model DIR [--size 256x256] [--steps 50] [--guidance 4] [--seed 7]
//                       [--prompt TEXT]
//
// Settings: fewer steps (8, 16, 25); CFG intervals ([0, 0.6], [0.2, 0.8], [0, 0.4]);
// CFG-Zero* (with one zero-init step); guidance rescale 0.7; the transformer at bf16 and int8;
// the UniPC sampler at a third of the steps; the preview decoder (the latent-to-RGB projection
// of the final latent, as previews show it, against the VAE's decode). Two rows give the
// scale: the same settings at another seed (how far apart two unrelated images are) and the
// reference run again (determinism: PSNR inf).
//
// NOTE: on random weights (every Z-Image checkpoint this machine has: the demo set's
// demo-image by default) the figures say how far each knob moves the output, not how a trained
// model's images degrade; trajectories of trained models are smoother. Run it on a real
// checkpoint for those figures.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engines/denoise/image_pipeline.h"
#include "frontends/image_frontend.h"
#include "media/image_quality.h"
#include "serving/config.h"
#include "tools/demo/demo.h"

namespace {

namespace denoise = prism::engines::denoise;
using prism::frontends::ImageParams;
using prism::ops::Precision;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "image_quality_bench: %s\n", message.c_str());
  std::exit(1);
}

template <class T>
T value_or_die(prism::Result<T> r, const std::string& what) {
  if (!r.has_value()) die(what + ": " + r.status().message());
  return std::move(r).value();
}

struct Run {
  prism::media::Image image;
  prism::media::Image preview;  // the final latent through the preview projection
  int64_t passes = 0;
  double seconds = 0;
};

// One image through the pipeline's loop, as the engine runs it (one request, one image).
Run generate(const denoise::ImagePipeline& pipeline, const ImageParams& params, const prism::Tensor& cond,
             const prism::Tensor& uncond) {
  const auto t0 = std::chrono::steady_clock::now();
  denoise::DenoiseLoop loop;
  denoise::DenoiseRequest request = value_or_die(pipeline.make_request(0, params, 0, cond, uncond), "request");
  if (prism::Status s = loop.add(std::move(request)); !s.ok()) die("loop: " + s.message());
  prism::Tensor latent;
  while (loop.num_running() > 0)
    for (denoise::DenoiseResult& r : loop.step(pipeline.denoiser(), 0)) latent = r.latent;
  Run run;
  run.image = pipeline.decode(latent);
  run.preview = pipeline.preview(latent);
  run.passes = loop.counters().cond_passes + loop.counters().uncond_passes;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = arg(argc, argv, "--model", "");
  if (model.empty()) {
    const std::string demo = std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/prism/demo";
    value_or_die(prism::tools::demo::ensure_demo(demo), "demo set");
    model = demo + "/demo-image";
  }
  const std::string size = arg(argc, argv, "--size", "256x256");
  const int steps = std::stoi(arg(argc, argv, "--steps", "50"));
  const float guidance = std::stof(arg(argc, argv, "--guidance", "4"));
  const uint64_t seed = std::stoull(arg(argc, argv, "--seed", "7"));
  const std::string prompt = arg(argc, argv, "--prompt", "a lighthouse on a cliff at dusk, oil painting");

  prism::serving::DeploymentConfig config;
  config.name = "image";
  config.task = "image";
  config.model = model;
  const auto frontend = value_or_die(prism::frontends::ImageFrontend::load(config), "frontend");
  ImageParams base = frontend->defaults();
  if (std::sscanf(size.c_str(), "%dx%d", &base.width, &base.height) != 2) die("--size must be WxH");
  if (prism::Status s = frontend->check_size(base.width, base.height); !s.ok()) die("--size " + s.message());
  base.steps = steps;
  base.guidance_scale = guidance;
  base.seed = seed;

  std::map<Precision, std::unique_ptr<denoise::ImagePipeline>> pipelines;
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8})
    pipelines[p] = value_or_die(denoise::ImagePipeline::load(model, {.precision = p}), "load");
  const denoise::ImagePipeline& f32 = *pipelines[Precision::f32];
  const prism::Tensor cond = f32.encode_prompt(value_or_die(frontend->prompt_tokens(prompt), "prompt"));
  const prism::Tensor uncond = f32.encode_prompt(value_or_die(frontend->prompt_tokens(""), "negative prompt"));

  std::printf("image_quality_bench: %s, %dx%d, %d steps, guidance %.1f, seed %llu (random weights unless the model "
              "is a trained checkpoint)\n",
              model.c_str(), base.width, base.height, steps, guidance, static_cast<unsigned long long>(seed));
  const Run reference = generate(f32, base, cond, uncond);
  std::printf("%-34s %7s %9s %9s %7s\n", "setting", "passes", "seconds", "PSNR dB", "SSIM");
  auto row = [&](const std::string& name, const Run& run, const prism::media::Image& image) {
    std::printf("%-34s %7lld %9.2f %9.2f %7.4f\n", name.c_str(), static_cast<long long>(run.passes), run.seconds,
                prism::media::psnr(reference.image, image), prism::media::ssim(reference.image, image));
  };
  auto variant = [&](const std::string& name, const std::function<void(ImageParams&)>& edit,
                     Precision precision = Precision::f32) {
    ImageParams p = base;
    edit(p);
    const Run run = generate(*pipelines[precision], p, cond, uncond);
    row(name, run, run.image);
  };

  row("reference (f32, all steps, CFG)", reference, reference.image);
  variant("reference again (determinism)", [](ImageParams&) {});
  variant("another seed (scale)", [](ImageParams& p) { p.seed += 1000; });
  for (int s : {8, 16, 25})
    if (s < steps) variant("steps " + std::to_string(s), [s](ImageParams& p) { p.steps = s; });
  variant("unipc, steps " + std::to_string(steps / 3), [&](ImageParams& p) {
    p.sampler = prism::frontends::Sampler::unipc;
    p.steps = std::max(1, steps / 3);
  });
  for (auto [start, stop] : {std::pair{0.0f, 0.6f}, std::pair{0.2f, 0.8f}, std::pair{0.0f, 0.4f}}) {
    char name[64];
    std::snprintf(name, sizeof(name), "cfg interval [%.1f, %.1f]", start, stop);
    variant(name, [start, stop](ImageParams& p) {
      p.cfg_start = start;
      p.cfg_stop = stop;
    });
  }
  variant("cfg-zero* (1 zero-init step)", [](ImageParams& p) {
    p.cfg_zero_star = true;
    p.zero_init_steps = 1;
  });
  variant("guidance rescale 0.7", [](ImageParams& p) { p.guidance_rescale = 0.7f; });
  variant("transformer bf16", [](ImageParams&) {}, Precision::bf16);
  variant("transformer int8", [](ImageParams&) {}, Precision::int8);
  row("preview decoder (latent_rgb)", reference, reference.preview);
  return 0;
}

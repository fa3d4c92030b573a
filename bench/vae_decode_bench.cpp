// vae_decode_bench: the AutoencoderKL decoder's peak memory and time for one latent, whole or
// tiled, so the memory figures in models/vae/autoencoder_kl.h can be re-measured.
//
//   build/bench/vae_decode_bench --model DIR --latent H,W [--tile L] [--overlap F]
//
// DIR is a vae/ folder, e.g. FLUX's sizes with random weights from
//   /usr/bin/python3 tests/reference/vae_decoder.py --real-size --out /tmp/flux-vae
// Without --tile the latent is decoded whole; with it, tiled with L-cell tiles (diffusers'
// tile_latent_min_size; FLUX's default is 128). Peak memory is the process's peak resident set
// during the decode (VmHWM, reset after loading) less its resident set before it: what the
// decode itself added (its activations, the output image, oneDNN's scratch). A warm-up decode
// of a tiny latent first, so oneDNN's code and caches are not counted. Not a test: prints
// figures, asserts nothing.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "models/vae/autoencoder_kl.h"
#include "runtime/tensor.h"

namespace {

double resident_mib() {  // current resident set, from /proc/self/statm (pages)
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// The peak resident set since the last reset_peak(): VmHWM of /proc/self/status.
double peak_resident_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;  // kB
  return 0.0;
}

// Linux resets VmHWM to the current resident set on "5" (since 4.0), so the load's transient
// (the mapped file beside the copies made of it) does not count as the decode's.
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

int usage() {
  std::fprintf(stderr, "usage: vae_decode_bench --model DIR --latent H,W [--tile L] [--overlap F]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace prism;
  std::string model;
  int64_t h = 0, w = 0, tile = 0;
  double overlap = 0.25;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--model") model = value;
    else if (key == "--latent") std::sscanf(value.c_str(), "%ld,%ld", &h, &w);
    else if (key == "--tile") tile = std::atol(value.c_str());
    else if (key == "--overlap") overlap = std::atof(value.c_str());
    else return usage();
  }
  if (model.empty() || h <= 0 || w <= 0) return usage();
  Result<std::unique_ptr<models::AutoencoderKLDecoder>> vae = models::AutoencoderKLDecoder::load(model);
  if (!vae) {
    std::fprintf(stderr, "%s\n", vae.status().to_string().c_str());
    return 1;
  }
  const models::AutoencoderKLDecoder& v = **vae;
  Tensor z = Tensor::empty({1, v.config().latent_channels, h, w}, DType::f32);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] = normal(rng);
  const models::VaeTiling tiling{.tile_latent_size = tile, .overlap_factor = overlap};
  if (tile > 0) {
    const Status ok = v.check_tiling(tiling);
    if (!ok.ok()) {
      std::fprintf(stderr, "%s\n", ok.to_string().c_str());
      return 1;
    }
  }
  (void)v.decode(Tensor::zeros({1, v.config().latent_channels, 2, 2}, DType::f32));  // warm-up
  const double base = resident_mib();
  reset_peak();
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor image = tile > 0 ? v.tiled_decode(z, tiling) : v.decode(z);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double peak = peak_resident_mib();
  std::printf("latent %ldx%ld -> image %ldx%ld, %s: %.1f s, weights %.0f MiB, resident after load %.0f MiB, "
              "peak %.0f MiB, decode added %.0f MiB (output %.0f MiB)\n",
              h, w, image.size(2), image.size(3),
              tile > 0 ? ("tiles of " + std::to_string(tile) + " cells").c_str() : "whole", seconds,
              double(v.weight_bytes()) / 1048576.0, base, peak, peak - base, double(image.nbytes()) / 1048576.0);
  return 0;
}

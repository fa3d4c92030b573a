// vae_decode_bench: the AutoencoderKL decoder's peak memory and time for one latent, whole or
// tiled, so the memory and time figures in models/vae/autoencoder_kl.h can be re-measured.
//
//   build/bench/vae_decode_bench --model DIR --latent H,W [--tile L] [--overlap F]
//                                [--convs plain,f32,bf16] [--threads N]
//
// DIR is a vae/ folder, e.g. FLUX's sizes with random weights from
//   /usr/bin/python3 tests/reference/vae_decoder.py --real-size --out /tmp/flux-vae
// Without --tile the latent is decoded whole; with it, tiled with L-cell tiles (diffusers'
// tile_latent_min_size; FLUX's default is 128). --convs lists the convolution paths to decode
// with, one decoder each, in the same run: plain (ops::conv2d on the checkpoint's OIHW
// weights), f32 / bf16 (weights packed at load, AutoencoderKLLoadOptions); f32 by default.
// Each decode is printed with its seconds and GFLOP/s (the decoder's FLOPs counted from the
// config), against oneDNN's f32 and bf16 GEMM peak measured in the same run (a packed linear
// of 2048^3). With --threads 1 times are the thread's CPU time (what one core does,
// whatever the neighbours on a shared machine do); otherwise wall time.
// Peak memory is the process's peak resident set during the decode (VmHWM, reset after
// loading) less its resident set before it: what the decode itself added (its activations, the
// output image, oneDNN's scratch). A warm-up decode of a tiny latent first, so oneDNN's code
// and caches are not counted. Not a test: prints figures, asserts nothing.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <ctime>
#include <vector>

#include "models/vae/autoencoder_kl.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "runtime/threads.h"

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
  std::fprintf(stderr,
               "usage: vae_decode_bench --model DIR --latent H,W [--tile L] [--overlap F] [--convs plain,f32,bf16] [--threads N]\n");
  return 2;
}

// The thread's CPU seconds with one thread (OpenMP then runs on the caller), else wall seconds.
double now_seconds() {
  if (prism::num_threads() == 1) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// FLOPs of one whole decode of an h x w latent (2 per multiply-add): the convolutions, and the
// mid-block attention's projections and two score matmuls. GroupNorm, upsampling and the
// additions are O(activations) and left out.
double decode_flops(const prism::configs::AutoencoderKLConfig& c, int64_t h, int64_t w) {
  const std::vector<int64_t>& ch = c.block_out_channels;
  double flops = 0, s = double(h * w);
  auto conv = [&](int64_t in, int64_t out, int64_t k) { flops += 2.0 * double(in * k * k) * double(out) * s; };
  auto resnet = [&](int64_t in, int64_t out) {
    conv(in, out, 3);
    conv(out, out, 3);
    if (in != out) conv(in, out, 1);
  };
  const int64_t top = ch.back();
  if (c.use_post_quant_conv) conv(c.latent_channels, c.latent_channels, 1);
  conv(c.latent_channels, top, 3);
  resnet(top, top);
  if (c.mid_block_add_attention) flops += 2.0 * s * double(top) * double(4 * top) + 4.0 * s * s * double(top);
  resnet(top, top);
  int64_t prev = top;
  for (int64_t i = 0; i < c.num_blocks(); ++i) {
    const int64_t out = ch[size_t(c.num_blocks() - 1 - i)];
    for (int64_t j = 0; j <= c.layers_per_block; ++j) resnet(j == 0 ? prev : out, out);
    if (i + 1 < c.num_blocks()) {
      s *= 4;
      conv(out, out, 3);
    }
    prev = out;
  }
  conv(ch[0], c.out_channels, 3);
  return flops;
}

double gemm_peak_gflops(prism::ops::Precision p) {
  using namespace prism;
  const int64_t n = 2048;
  Tensor w = Tensor::empty({n, n}, DType::f32), x = Tensor::empty({n, n}, DType::f32);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n * n; ++i) w.data<float>()[i] = 0.05f * u(rng), x.data<float>()[i] = u(rng);
  Result<ops::LinearWeight> lw = ops::pack_linear(w, Tensor(), p);
  if (!lw) return 0;
  (void)ops::linear(x, *lw);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_seconds();
    (void)ops::linear(x, *lw);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

}  // namespace

int decode_once(const std::string& model, const prism::models::AutoencoderKLLoadOptions& options,
                const std::string& mode, int64_t h, int64_t w, int64_t tile, double overlap, double peak_f32,
                double peak_bf16) {
  using namespace prism;
  Result<std::unique_ptr<models::AutoencoderKLDecoder>> vae = models::AutoencoderKLDecoder::load(model, options);
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
  const double t0 = now_seconds();
  const Tensor image = tile > 0 ? v.tiled_decode(z, tiling) : v.decode(z);
  const double seconds = now_seconds() - t0;
  const double peak = peak_resident_mib();
  const double gflops = decode_flops(v.config(), h, w) / seconds / 1e9;
  const double ceiling = mode == "bf16" ? peak_bf16 : peak_f32;
  std::printf("convs %-5s latent %ldx%ld -> image %ldx%ld, %s: %.2f s, %.1f GFLOP/s (%.0f%% of %s GEMM peak%s), "
              "weights %.0f MiB, resident after load %.0f MiB, peak %.0f MiB, decode added %.0f MiB (output %.0f MiB)\n",
              mode.c_str(), h, w, image.size(2), image.size(3),
              tile > 0 ? ("tiles of " + std::to_string(tile) + " cells").c_str() : "whole", seconds, gflops,
              100 * gflops / ceiling, mode == "bf16" ? "bf16" : "f32", tile > 0 ? ", FLOPs of the whole decode" : "",
              double(v.weight_bytes()) / 1048576.0, base, peak, peak - base, double(image.nbytes()) / 1048576.0);
  return 0;
}

int main(int argc, char** argv) {
  using namespace prism;
  std::string model;
  int64_t h = 0, w = 0, tile = 0;
  double overlap = 0.25;
  std::string convs = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--model") model = value;
    else if (key == "--latent") std::sscanf(value.c_str(), "%ld,%ld", &h, &w);
    else if (key == "--tile") tile = std::atol(value.c_str());
    else if (key == "--overlap") overlap = std::atof(value.c_str());
    else if (key == "--convs") convs = value;
    else if (key == "--threads") set_num_threads(std::atoi(value.c_str()));
    else return usage();
  }
  if (model.empty() || h <= 0 || w <= 0) return usage();
  const double peak_f32 = gemm_peak_gflops(ops::Precision::f32), peak_bf16 = gemm_peak_gflops(ops::Precision::bf16);
  std::printf("threads %d (%s time); oneDNN GEMM peak (packed linear 2048^3): f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
              num_threads(), num_threads() == 1 ? "thread CPU" : "wall", peak_f32, peak_bf16);
  std::printf("conv f32 : %s\nconv bf16: %s\n", ops::conv2d_path(ops::Precision::f32).c_str(),
              ops::conv2d_path(ops::Precision::bf16).c_str());
  for (size_t at = 0; at < convs.size();) {
    const size_t comma = convs.find(',', at);
    const std::string mode = convs.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? convs.size() : comma + 1;
    models::AutoencoderKLLoadOptions options;
    if (mode == "plain") options.pack_convs = false;
    else if (mode == "bf16") options.conv_precision = ops::Precision::bf16;
    else if (mode != "f32") return usage();
    if (int rc = decode_once(model, options, mode, h, w, tile, overlap, peak_f32, peak_bf16); rc != 0) return rc;
  }
  return 0;
}

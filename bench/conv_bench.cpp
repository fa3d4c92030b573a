// conv_bench: the FLUX VAE decoder's convolution shapes through the plain ops::conv2d (oneDNN
// on NCHW / OIHW as given) and through weights packed once (ops::pack_conv2d, f32 and bf16),
// each as GFLOP/s and as a fraction of oneDNN's own GEMM peak measured in the same run (a
// packed linear of 2048 x 2048 x 2048, f32 and bf16): the ceiling a convolution lowered to
// GEMM could reach on this machine and tier.
//
//   build/bench/conv_bench [--image S] [--threads N]   (S: the decoded image's side; 512 by default)
//   With --threads 1 calls are timed by the thread's CPU clock (what one core does).
//
// PRISM_ISA forces a tier. Not a test: prints figures, asserts nothing.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "bench/bench_timing.h"
#include "runtime/isa.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using namespace prism;

Tensor random_tensor(const Dims& shape, float lo, float hi, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

struct Shape {
  const char* where;  // the decoder's layer
  int64_t c_in, c_out, k, side_div;  // side = image side / side_div
};

// Every distinct convolution of the FLUX decoder (block_out_channels 128, 256, 512, 512;
// latent 16); count: how many run at that shape in one decode.
const Shape kShapes[] = {
    {"conv_in 16->512 3x3 @S/8", 16, 512, 3, 8},
    {"mid+up0 512->512 3x3 @S/8 (x10)", 512, 512, 3, 8},
    {"up0 upsample + up1 512 3x3 @S/4 (x7)", 512, 512, 3, 4},
    {"up1 upsample 512 3x3 @S/2", 512, 512, 3, 2},
    {"up2 conv1 512->256 3x3 @S/2", 512, 256, 3, 2},
    {"up2 shortcut 512->256 1x1 @S/2", 512, 256, 1, 2},
    {"up2 256 3x3 @S/2 (x5)", 256, 256, 3, 2},
    {"up2 upsample 256 3x3 @S", 256, 256, 3, 1},
    {"up3 conv1 256->128 3x3 @S", 256, 128, 3, 1},
    {"up3 shortcut 256->128 1x1 @S", 256, 128, 1, 1},
    {"up3 128 3x3 @S (x5)", 128, 128, 3, 1},
    {"conv_out 128->3 3x3 @S", 128, 3, 3, 1},
};

double gemm_peak_gflops(ops::Precision p, const bench::Timing& timing) {
  const int64_t n = 2048;
  const Tensor w = random_tensor({n, n}, -0.05f, 0.05f, 1);
  const Tensor x = random_tensor({n, n}, -1, 1, 2);
  Result<ops::LinearWeight> lw = ops::pack_linear(w, Tensor(), p);
  if (!lw) return 0;
  const double t = timing.best_seconds([&] { (void)ops::linear(x, *lw); });
  return 2.0 * double(n) * double(n) * double(n) / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (Status s = select_isa_from_env(std::getenv("PRISM_ISA")); !s.ok()) {
    std::fprintf(stderr, "PRISM_ISA: %s\n", s.message().c_str());
    return 1;
  }
  int64_t image = 512;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--image") image = std::atol(argv[i + 1]);
    else if (std::string(argv[i]) == "--threads") set_num_threads(std::atoi(argv[i + 1]));
  // One thread (--threads 1) is timed by its CPU clock: what a core does per second,
  // whatever the neighbours on a shared machine do.
  const bench::Timing timing{.rep_seconds = 0.5, .reps = 3, .thread_cpu_clock = num_threads() == 1};
  std::printf("kernels: %s, threads: %d, image %ldx%ld\n", std::string(isa_name(active_isa())).c_str(), num_threads(),
              image, image);
  std::printf("conv f32 : %s\nconv bf16: %s\n", ops::conv2d_path(ops::Precision::f32).c_str(),
              ops::conv2d_path(ops::Precision::bf16).c_str());
  const double peak_f32 = gemm_peak_gflops(ops::Precision::f32, timing);
  const double peak_bf16 = gemm_peak_gflops(ops::Precision::bf16, timing);
  std::printf("oneDNN GEMM peak (packed linear 2048^3): f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n\n", peak_f32, peak_bf16);
  std::printf("%-38s %10s %16s %16s %16s %8s %8s\n", "shape", "plain ms", "plain GF/s (%pk)", "f32 GF/s (%pk)",
              "bf16 GF/s (%pk)", "f32 x", "bf16 x");
  for (const Shape& s : kShapes) {
    const int64_t side = image / s.side_div;
    const Tensor x = random_tensor({1, s.c_in, side, side}, -1, 1, 3);
    const Tensor w = random_tensor({s.c_out, s.c_in, s.k, s.k}, -0.05f, 0.05f, 4);
    const Tensor b = random_tensor({s.c_out}, -0.1f, 0.1f, 5);
    const int pad = int(s.k / 2);
    const ops::Conv2dParams p{.padding_h = pad, .padding_w = pad};
    const double flops = 2.0 * double(s.c_out) * double(s.c_in * s.k * s.k) * double(side * side) / 1e9;
    const double plain = timing.best_seconds([&] { (void)ops::conv2d(x, w, b, p); });
    Result<ops::ConvWeight> f32 = ops::pack_conv2d(w, b, p, ops::Precision::f32);
    Result<ops::ConvWeight> bf16 = ops::pack_conv2d(w, b, p, ops::Precision::bf16);
    if (!f32 || !bf16) {
      std::fprintf(stderr, "pack_conv2d failed\n");
      return 1;
    }
    const double tf = timing.best_seconds([&] { (void)ops::conv2d(x, *f32); });
    const double tb = timing.best_seconds([&] { (void)ops::conv2d(x, *bf16); });
    std::printf("%-38s %10.2f %9.1f (%3.0f%%) %9.1f (%3.0f%%) %9.1f (%3.0f%%) %7.2fx %7.2fx\n", s.where, plain * 1e3,
                flops / plain, 100 * flops / plain / peak_f32, flops / tf, 100 * flops / tf / peak_f32, flops / tb,
                100 * flops / tb / peak_bf16, plain / tf, plain / tb);
  }
  std::printf("(%%pk: of the same precision's GEMM peak; plain and f32 against f32's. x: plain's time over "
              "the packed one's.)\n");
  return 0;
}

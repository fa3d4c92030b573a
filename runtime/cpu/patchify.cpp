// patchify: images cut into the rows of a ViT's patch embedding (im2col for a convolution whose
// stride is its kernel size, so patches do not overlap and every pixel is copied at most once).
// Pure data movement: no arithmetic, no oneDNN; the GEMM against the conv weight is the
// caller's ops::linear.
// NOTE: a patch row is C runs of p rows of p contiguous pixels, so each run is one memcpy; work
// is spread over the OpenMP pool by bands (one view's row of g patches).
#include <algorithm>
#include <cstring>

#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {

Tensor patchify(const Tensor& pixels, int64_t patch_size) {
  PRISM_CHECK_MSG(pixels.dim() == 4 && pixels.dtype() == DType::f32 && pixels.is_contiguous() &&
                      pixels.size(2) == pixels.size(3),
                  "patchify: pixels must be [V, C, S, S] f32, contiguous");
  const int64_t v = pixels.size(0), c = pixels.size(1), s = pixels.size(2), p = patch_size;
  PRISM_CHECK_MSG(p > 0 && p <= s, "patchify: patch_size must be in [1, S]");
  const int64_t g = s / p;
  const int64_t row = c * p * p;
  Tensor out = Tensor::empty({v * g * g, row}, DType::f32);
  const float* src = pixels.data<float>();
  float* dst = out.data<float>();
  const int64_t per_unit = g * row;  // one band of g patches
  parallel_for(v * g, std::max<int64_t>(1, 16384 / std::max<int64_t>(per_unit, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t view = b / g, gy = b % g;
      for (int64_t gx = 0; gx < g; ++gx) {
        float* o = dst + ((view * g + gy) * g + gx) * row;
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t ky = 0; ky < p; ++ky) {
            const float* in = src + ((view * c + ch) * s + gy * p + ky) * s + gx * p;
            std::memcpy(o + (ch * p + ky) * p, in, size_t(p) * sizeof(float));
          }
      }
    }
  });
  return out;
}

}  // namespace prism::ops

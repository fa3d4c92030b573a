// Rotary position embeddings: the inverse-frequency vector, a cos/sin table built once per
// model, and the in-place rotation of q or k heads (possibly a strided view of a fused QKV) by
// the tier's kernels (runtime/cpu/kernels/rope.cpp).
// NOTE: inv_freq and the table follow Hugging Face's f32 arithmetic: angle = float(pos) * inv_freq rounded to
// f32 (as its f32 outer product does), then cos/sin of that f32 angle, here in double. That
// keeps long positions, where the f32 product's rounding dominates, aligned with PyTorch.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/rope_kernels.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {

Tensor rope_inv_freq(int rotary_dim, double theta) {
  PRISM_CHECK_MSG(rotary_dim > 0 && rotary_dim % 2 == 0, "rope: rotary_dim must be even and positive");
  const int half = rotary_dim / 2;
  Tensor out = Tensor::empty({half}, DType::f32);  // [rotary_dim / 2] f32
  float* p = out.data<float>();
  // Hugging Face's f32 steps: exponent = f32(2i) / f32(dim), then 1 / theta^exponent in f32.
  // Matching its roundings matters: one ulp of inv_freq is ~2e-4 rad at position 4000.
  const double theta_f = float(theta);
  for (int i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(rotary_dim);
    p[i] = 1.0f / float(std::pow(theta_f, double(exponent)));
  }
  return out;
}

RopeTable make_rope_table(const Tensor& inv_freq, int64_t max_positions) {
  PRISM_CHECK_MSG(inv_freq.dtype() == DType::f32 && inv_freq.dim() == 1 && inv_freq.is_contiguous(),
                  "rope: inv_freq must be [rotary_dim / 2] f32");
  PRISM_CHECK(max_positions > 0);
  const int64_t half = inv_freq.size(0);
  RopeTable t;
  t.rotary_dim = int(2 * half);
  t.cos = Tensor::empty({max_positions, half}, DType::f32);
  t.sin = Tensor::empty({max_positions, half}, DType::f32);
  const float* f = inv_freq.data<float>();
  float* pc = t.cos.data<float>();
  float* ps = t.sin.data<float>();
  parallel_for(max_positions, std::max<int64_t>(1, 4096 / std::max<int64_t>(half, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(p) * f[i];
        pc[p * half + i] = float(std::cos(double(angle)));
        ps[p * half + i] = float(std::sin(double(angle)));
      }
  });
  return t;
}

void apply_rope(Tensor& x, const Tensor& positions, const RopeTable& table, RopeStyle style) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && x.dim() == 3 && x.stride(2) == 1,
                  "apply_rope: x must be [T, H, D] f32 with a contiguous last dim");
  PRISM_CHECK_MSG(positions.dim() == 1 && positions.size(0) == x.size(0) &&
                      (positions.dtype() == DType::i32 || positions.dtype() == DType::i64),
                  "apply_rope: positions must be [T] i32");
  const int64_t half = table.rotary_dim / 2;
  PRISM_CHECK_MSG(table.rotary_dim > 0 && table.rotary_dim <= x.size(2) && table.cos.size(1) == half,
                  "apply_rope: rotary_dim must fit in head_dim");
  const int64_t num_tokens = x.size(0), num_heads = x.size(1), max_pos = table.cos.size(0);
  const int64_t st = x.stride(0), sh = x.stride(1);
  const Tensor pos = positions.contiguous();
  const int64_t* pos64 = pos.dtype() == DType::i64 ? pos.data<int64_t>() : nullptr;
  const int32_t* pos32 = pos64 ? nullptr : pos.data<int32_t>();
  float* px = x.data<float>();
  const float* pc = table.cos.data<float>();
  const float* ps = table.sin.data<float>();
  const cpu::RopeKernels& k = cpu::rope_kernels();
  const auto rotate = style == RopeStyle::half ? k.rotate_half : k.rotate_pairs;
  // Rows are (token, head); a chunk is ~8K rotated floats so small calls stay on one thread.
  parallel_for(num_tokens * num_heads, std::max<int64_t>(1, 4096 / half), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / num_heads, h = r % num_heads;
      const int64_t p = pos64 ? pos64[t] : pos32[t];
      PRISM_CHECK_MSG(p >= 0 && p < max_pos, "apply_rope: position outside the table");
      rotate(px + t * st + h * sh, pc + p * half, ps + p * half, half);
    }
  });
}

void rms_norm_rope_(Tensor& x, const Tensor& weight, float eps, const Tensor& positions, const RopeTable& table,
                    RopeStyle style) {
  PRISM_CHECK_MSG(x.dtype() == DType::f32 && x.dim() == 3 && x.stride(2) == 1,
                  "rms_norm_rope_: x must be [T, H, D] f32 with a contiguous last dim");
  const int64_t num_tokens = x.size(0), num_heads = x.size(1), d = x.size(2);
  PRISM_CHECK_MSG(weight.dtype() == DType::f32 && weight.dim() == 1 && weight.size(0) == d && weight.is_contiguous(),
                  "rms_norm_rope_: weight must be [head_dim] f32, contiguous");
  PRISM_CHECK_MSG(positions.dim() == 1 && positions.size(0) == num_tokens &&
                      (positions.dtype() == DType::i32 || positions.dtype() == DType::i64),
                  "rms_norm_rope_: positions must be [T] i32");
  const int64_t half = table.rotary_dim / 2;
  PRISM_CHECK_MSG(table.rotary_dim > 0 && table.rotary_dim <= d && table.cos.size(1) == half,
                  "rms_norm_rope_: rotary_dim must fit in head_dim");
  const int64_t max_pos = table.cos.size(0), st = x.stride(0), sh = x.stride(1);
  const Tensor pos = positions.contiguous();
  const int64_t* pos64 = pos.dtype() == DType::i64 ? pos.data<int64_t>() : nullptr;
  const int32_t* pos32 = pos64 ? nullptr : pos.data<int32_t>();
  float* px = x.data<float>();
  const float* pw = weight.data<float>();
  const float* pc = table.cos.data<float>();
  const float* ps = table.sin.data<float>();
  const cpu::RopeKernels& k = cpu::rope_kernels();
  const auto norm_rotate = style == RopeStyle::half ? k.rms_norm_rotate_half : k.rms_norm_rotate_pairs;
  // Rows are (token, head), as apply_rope's; each head is read and written once.
  parallel_for(num_tokens * num_heads, std::max<int64_t>(1, 4096 / d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / num_heads, h = r % num_heads;
      const int64_t p = pos64 ? pos64[t] : pos32[t];
      PRISM_CHECK_MSG(p >= 0 && p < max_pos, "rms_norm_rope_: position outside the table");
      norm_rotate(px + t * st + h * sh, d, pw, eps, pc + p * half, ps + p * half, half);
    }
  });
}

}  // namespace prism::ops

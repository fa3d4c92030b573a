// runtime/cpu/linear_int8.cpp: Int8Kernels::pack of every tier (linear_int8.h), the baseline
// half of the int8 kernel: shape checks, the aligned allocation and the Int8Weights that owns
// it, around the tier's layout and pack_into. The per-tier kernels/linear_int8.cpp only lays
// bytes out, so that none of this shared_ptr / Result code is ever compiled with a tier's
// AVX-512 flags. Must not: contain SIMD code.
#include "runtime/cpu/linear_int8.h"

#include <string>

#include "runtime/arena.h"

namespace prism::cpu {
namespace {

Result<Int8Weights> pack(const Int8Kernels& kernels, const int8_t* q, const float* scales, int64_t n, int64_t k) {
  if (n <= 0 || k <= 0)
    return invalid_argument("int8 pack: empty weights [" + std::to_string(n) + ", " + std::to_string(k) + "]");
  if (k > kInt8MaxK)
    return invalid_argument("int8 pack: K = " + std::to_string(k) + " above " + std::to_string(kInt8MaxK) +
                            " could overflow the int32 sums");
  const Int8Layout layout = kernels.layout(n, k);
  Int8Weights w;
  w.memory = allocate_aligned(layout.bytes);
  kernels.pack_into(q, scales, n, k, w.memory.get());
  w.data = static_cast<const int8_t*>(w.memory.get());
  w.scales = reinterpret_cast<const float*>(w.data + layout.scales_offset);
  w.n = n;
  w.k = k;
  w.n_padded = layout.n_padded;
  w.k_padded = layout.k_padded;
  return w;
}

}  // namespace

namespace avx2 {
Result<Int8Weights> pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k) {
  return pack(kInt8Kernels, q, scales, n, k);
}
}  // namespace avx2

namespace avx512 {
Result<Int8Weights> pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k) {
  return pack(kInt8Kernels, q, scales, n, k);
}
}  // namespace avx512

namespace avx512_bf16 {
Result<Int8Weights> pack_int8(const int8_t* q, const float* scales, int64_t n, int64_t k) {
  return pack(kInt8Kernels, q, scales, n, k);
}
}  // namespace avx512_bf16

}  // namespace prism::cpu

// Naive attention for the attention and paged-attention tests: softmax(Q K^T * scale + mask) V
// in double precision, one (token, head) at a time, straight from the definition in
// runtime/ops.h. Slow on purpose; it shares no code with the kernels it checks.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/tensor.h"

namespace prism::test {

struct AttentionCase {
  std::vector<int32_t> cu_q, cu_k;  // [num_seqs + 1]
  std::vector<int32_t> kv_lens;     // empty: every key is attended
  float scale = 0.0f;               // 0: 1 / sqrt(D)
  bool causal = true;
};

// q: [Tq, Hq, D]; k, v: [Tk, Hkv, D] f32 (any strides). Returns [Tq * Hq * D]; a row with no
// key to attend is 0.
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionCase& c);

// Uniform in [-1, 1), contiguous f32.
Tensor random_tensor(const Dims& shape, std::mt19937& rng);

// Max over elements of |got - want| / (atol + rtol * |want|): <= 1 passes.
double max_scaled_error(const Tensor& got, const std::vector<double>& want, double rtol, double atol);

}  // namespace prism::test

// ops::matmul against a naive double-accumulated reference: 2-D, batched, broadcast batch
// dims, transpose_b, alpha, strided views (read in place or copied), odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/ops.h"
#include "test_util/eltwise.h"

namespace prism::ops {
namespace {

// Element of t at a broadcast index over the output's batch dims (idx has out rank - 2
// entries; t's batch dims are right-aligned and size-1 dims broadcast).
const float* matrix_at(const Tensor& t, const std::vector<int64_t>& idx) {
  const float* p = static_cast<const float*>(t.raw_data());
  const int pad = int(idx.size()) - (t.dim() - 2);
  for (int d = 0; d < t.dim() - 2; ++d)
    if (t.size(d) != 1) p += idx[size_t(d + pad)] * t.stride(d);
  return p;
}

void check_matmul(const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  SCOPED_TRACE("a" + a.shape().to_string() + " b" + b.shape().to_string() +
               (opt.transpose_b ? " b^T" : "") + " alpha " + std::to_string(opt.alpha));
  const Tensor c = matmul(a, b, opt);
  const int64_t M = a.size(-2), K = a.size(-1), N = opt.transpose_b ? b.size(-2) : b.size(-1);
  ASSERT_EQ(c.size(-2), M);
  ASSERT_EQ(c.size(-1), N);
  ASSERT_TRUE(c.is_contiguous());
  const int nb = c.dim() - 2;
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= c.size(d);
  for (int64_t bi = 0; bi < batches; ++bi) {
    std::vector<int64_t> idx(static_cast<size_t>(nb), 0);
    for (int64_t r = bi, d = nb - 1; d >= 0; --d) {
      idx[size_t(d)] = r % c.size(int(d));
      r /= c.size(int(d));
    }
    const float* pa = matrix_at(a, idx);
    const float* pb = matrix_at(b, idx);
    const float* pc = c.data<float>() + bi * M * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = pa[m * a.stride(-2) + k * a.stride(-1)];
          const double bv = opt.transpose_b ? pb[n * b.stride(-2) + k * b.stride(-1)]
                                            : pb[k * b.stride(-2) + n * b.stride(-1)];
          acc += av * bv;
          mag += std::fabs(av * bv);
        }
        // f32 accumulation: max(K 2^-24, 2e-6) of the sum of |products| (see linear_test).
        const double tol = std::fabs(opt.alpha) * std::max(double(K) * std::ldexp(1.0, -24), 2e-6) * mag + 1e-7;
        ASSERT_NEAR(pc[m * N + n], opt.alpha * acc, tol) << "batch " << bi << " [" << m << ", " << n << "]";
      }
  }
}

TEST(MatmulTest, Plain2d) {
  check_matmul(test::random_f32({1, 64}, 1, -1.0f, 1.0f), test::random_f32({64, 32}, 2, -1.0f, 1.0f), {});
  check_matmul(test::random_f32({77, 77}, 3, -1.0f, 1.0f), test::random_f32({77, 77}, 4, -1.0f, 1.0f), {});
  check_matmul(test::random_f32({130, 33}, 5, -1.0f, 1.0f), test::random_f32({33, 65}, 6, -1.0f, 1.0f), {});
}

TEST(MatmulTest, TransposeBAndAlpha) {
  check_matmul(test::random_f32({9, 40}, 7, -1.0f, 1.0f), test::random_f32({31, 40}, 8, -1.0f, 1.0f), {.transpose_b = true});
  check_matmul(test::random_f32({9, 40}, 7, -1.0f, 1.0f), test::random_f32({40, 31}, 8, -1.0f, 1.0f), {.alpha = 0.125f});
  check_matmul(test::random_f32({3, 5, 64}, 9, -1.0f, 1.0f), test::random_f32({3, 7, 64}, 10, -1.0f, 1.0f), {.transpose_b = true, .alpha = -0.5f});
}

TEST(MatmulTest, BatchedAndBroadcast) {
  check_matmul(test::random_f32({4, 6, 20}, 11, -1.0f, 1.0f), test::random_f32({4, 20, 10}, 12, -1.0f, 1.0f), {});
  check_matmul(test::random_f32({2, 1, 5, 16}, 13, -1.0f, 1.0f), test::random_f32({3, 16, 8}, 14, -1.0f, 1.0f), {});      // [2, 3, 5, 8]
  check_matmul(test::random_f32({5, 16}, 15, -1.0f, 1.0f), test::random_f32({2, 3, 16, 8}, 16, -1.0f, 1.0f), {});         // a broadcast
  check_matmul(test::random_f32({2, 3, 5, 16}, 17, -1.0f, 1.0f), test::random_f32({1, 3, 8, 16}, 18, -1.0f, 1.0f), {.transpose_b = true});
}

TEST(MatmulTest, StridedViews) {
  // Attention-style: q and k as head views of a fused [T, 3, H, D] projection.
  const Tensor qkv = test::random_f32({12, 3, 4, 32}, 19, -1.0f, 1.0f);
  const Tensor q = qkv.select(1, 0).transpose(0, 1);  // [H, T, D], strided
  const Tensor k = qkv.select(1, 1).transpose(0, 1);
  check_matmul(q, k, {.transpose_b = true, .alpha = 0.17677669f});
  // A column slice (row stride > K), and an operand whose last dim is not contiguous.
  const Tensor wide = test::random_f32({10, 50}, 20, -1.0f, 1.0f);
  check_matmul(wide.slice(1, 10, 40), test::random_f32({30, 7}, 21, -1.0f, 1.0f), {});
  check_matmul(test::random_f32({24, 9}, 22, -1.0f, 1.0f).transpose(0, 1), test::random_f32({24, 5}, 23, -1.0f, 1.0f), {});
  check_matmul(test::random_f32({9, 24}, 24, -1.0f, 1.0f), test::random_f32({5, 24}, 25, -1.0f, 1.0f).transpose(0, 1), {});
}

TEST(MatmulTest, EmptyInnerDimGivesZeros) {
  const Tensor c = matmul(Tensor::empty({3, 0}, DType::f32), Tensor::empty({0, 4}, DType::f32));
  ASSERT_EQ(c.shape(), Dims({3, 4}));
  for (int64_t i = 0; i < c.numel(); ++i) EXPECT_EQ(c.data<float>()[i], 0.0f);
}

}  // namespace
}  // namespace prism::ops

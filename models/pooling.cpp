// configs::Pooling over a flat (packed or padded) batch, one sequence per task on the pool, and row
// L2 normalisation. The mean sums in f32, as sentence-transformers does in f32.
#include "models/pooling.h"

#include <algorithm>
#include <cmath>

#include "runtime/threads.h"

namespace prism::models {

Tensor pool(const Tensor& hidden, const EncoderBatch& batch, configs::Pooling pooling) {
  PRISM_CHECK_MSG(hidden.dim() == 2 && hidden.dtype() == DType::f32 && hidden.stride(1) == 1,
                  "pool: hidden must be [T, H] f32, rows contiguous");
  const Tensor& cu_seqlens = batch.cu_seqlens;
  PRISM_CHECK_MSG(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 1 && cu_seqlens.dtype() == DType::i32 &&
                      cu_seqlens.is_contiguous(),
                  "pool: cu_seqlens must be [S + 1] i32");
  const int64_t num_seqs = cu_seqlens.size(0) - 1, h = hidden.size(1), row_stride = hidden.stride(0);
  const int32_t* cu = cu_seqlens.data<int32_t>();
  PRISM_CHECK_MSG(cu[0] == 0 && cu[num_seqs] == hidden.size(0), "pool: cu_seqlens must span hidden's rows");
  const int32_t* kv_lens = nullptr;
  if (batch.kv_lens.defined()) {
    PRISM_CHECK_MSG(batch.kv_lens.dim() == 1 && batch.kv_lens.size(0) == num_seqs &&
                        batch.kv_lens.dtype() == DType::i32 && batch.kv_lens.is_contiguous(),
                    "pool: kv_lens must be [S] i32");
    kv_lens = batch.kv_lens.data<int32_t>();
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t slot = cu[s + 1] - cu[s];
    const int64_t real = kv_lens ? kv_lens[s] : slot;
    PRISM_CHECK_MSG(real >= 1 && real <= slot, "pool: every sequence needs 1..slot length real tokens");
  }

  Tensor out = Tensor::empty({num_seqs, h}, DType::f32);  // [S, H]
  const float* x = hidden.data<float>();
  float* y = out.data<float>();
  parallel_for(num_seqs, std::max<int64_t>(1, 8192 / std::max<int64_t>(h, 1)), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t first = cu[s], real = kv_lens ? kv_lens[s] : cu[s + 1] - cu[s];
      float* dst = y + s * h;
      switch (pooling) {
        case configs::Pooling::cls:
          std::copy_n(x + first * row_stride, h, dst);
          break;
        case configs::Pooling::last_token:
          std::copy_n(x + (first + real - 1) * row_stride, h, dst);
          break;
        case configs::Pooling::mean: {
          std::fill_n(dst, h, 0.0f);
          for (int64_t t = first; t < first + real; ++t) {
            const float* row = x + t * row_stride;
            for (int64_t i = 0; i < h; ++i) dst[i] += row[i];
          }
          const float inv = 1.0f / float(real);
          for (int64_t i = 0; i < h; ++i) dst[i] *= inv;
          break;
        }
      }
    }
  });
  return out;
}

void l2_normalize_rows(Tensor& x) {
  PRISM_CHECK_MSG(x.dim() == 2 && x.dtype() == DType::f32 && x.stride(1) == 1,
                  "l2_normalize_rows: x must be [S, D] f32, rows contiguous");
  const int64_t d = x.size(1), row_stride = x.stride(0);
  float* p = x.data<float>();
  for (int64_t s = 0; s < x.size(0); ++s) {
    float* row = p + s * row_stride;
    double sum = 0;  // f64: the norm of a long row without cancellation worries
    for (int64_t i = 0; i < d; ++i) sum += double(row[i]) * double(row[i]);
    const float inv = float(1.0 / std::max(std::sqrt(sum), 1e-12));
    for (int64_t i = 0; i < d; ++i) row[i] *= inv;
  }
}

}  // namespace prism::models

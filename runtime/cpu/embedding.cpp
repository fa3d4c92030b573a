// embedding and gather_rows: rows picked by index. embedding gathers table rows by id into f32
// rows, converting bf16/f16 tables on the fly: each output row is a copy (f32) or a widening
// by the tier's kernel (bf16: shift into the high half; f16: the hardware half-float
// conversion), spread over the OpenMP pool by rows. gather_rows picks rows of an f32
// activation (a decoder's rows that need logits).
// NOTE: an index outside the table or activation is a bug upstream (the tokenizer or engine
// built it), so it aborts through PRISM_CHECK rather than reading outside the tensor.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/pointwise_kernels.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace prism::ops {
namespace {

void copy_row_f32(const float* src, float* dst, int64_t h) { std::memcpy(dst, src, size_t(h) * 4); }

}  // namespace

Tensor embedding(const Tensor& table, const Tensor& ids) {
  PRISM_CHECK_MSG(table.dim() == 2 && table.stride(1) == 1, "embedding: table must be [vocab, H], rows contiguous");
  PRISM_CHECK_MSG(table.dtype() == DType::f32 || table.dtype() == DType::bf16 || table.dtype() == DType::f16,
                  "embedding: table must be f32, bf16 or f16");
  PRISM_CHECK_MSG(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, "embedding: ids must be i32 or i64");
  const int64_t vocab = table.size(0), h = table.size(1), row_stride = table.stride(0);
  const Tensor idc = ids.contiguous();
  Dims out_shape = ids.shape();
  out_shape.push_back(h);
  Tensor out = Tensor::empty(out_shape, DType::f32);
  const int64_t n = ids.numel();
  const bool i64 = ids.dtype() == DType::i64;
  const void* pid = idc.raw_data();
  const DType dt = table.dtype();
  const auto* base = static_cast<const std::byte*>(table.raw_data());
  const size_t elem = dtype_size(dt);
  float* py = out.data<float>();
  const cpu::PointwiseKernels& k = cpu::pointwise_kernels();
  parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(h, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t id = i64 ? static_cast<const int64_t*>(pid)[r] : static_cast<const int32_t*>(pid)[r];
      PRISM_CHECK_MSG(id >= 0 && id < vocab, "embedding: id out of range");
      const std::byte* src = base + size_t(id * row_stride) * elem;
      float* dst = py + r * h;
      if (dt == DType::f32) copy_row_f32(reinterpret_cast<const float*>(src), dst, h);
      else if (dt == DType::bf16) k.bf16_to_f32(reinterpret_cast<const bf16*>(src), dst, h);
      else k.f16_to_f32(reinterpret_cast<const f16*>(src), dst, h);
    }
  });
  return out;
}

// NOTE: one thread: R is a few rows per sequence of a step, each one memcpy, far less work
// than starting a parallel region.
Tensor gather_rows(const Tensor& x, const Tensor& rows) {
  PRISM_CHECK_MSG(x.dim() == 2 && x.dtype() == DType::f32 && x.is_contiguous(),
                  "gather_rows: x must be [N, D] f32, contiguous");
  PRISM_CHECK_MSG(rows.dim() == 1 && (rows.dtype() == DType::i32 || rows.dtype() == DType::i64),
                  "gather_rows: rows must be [R] i32 or i64");
  const int64_t n = x.size(0), d = x.size(1), num_rows = rows.size(0);
  const Tensor rc = rows.contiguous();
  const int64_t* r64 = rows.dtype() == DType::i64 ? rc.data<int64_t>() : nullptr;
  const int32_t* r32 = r64 == nullptr ? rc.data<int32_t>() : nullptr;
  Tensor out = Tensor::empty({num_rows, d}, DType::f32);
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < num_rows; ++i) {
    const int64_t r = r64 != nullptr ? r64[i] : r32[i];
    PRISM_CHECK_MSG(r >= 0 && r < n, "gather_rows: row out of range");
    copy_row_f32(src + r * d, dst + i * d, d);
  }
  return out;
}

}  // namespace prism::ops

// engines/generate/kv_cache.cpp: sizing, allocation and block copies of the paged KV tensors.
#include "engines/generate/kv_cache.h"

#include <cstring>

#include "base/check.h"

namespace prism::engines::generate {

Result<DType> parse_kv_cache_dtype(std::string_view name, ops::Precision precision) {
  if (name == "auto") return precision == ops::Precision::f32 ? DType::f32 : DType::bf16;
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "int8") return DType::i8;
  return invalid_argument("knob 'kv_cache_dtype' must be auto, f32, bf16 or int8 (got '" + std::string(name) + "')");
}

int64_t kv_bytes_per_block(const models::KvSpec& spec, int block_size, DType dtype) {
  const int64_t values = int64_t(block_size) * spec.num_kv_heads * spec.head_dim * int64_t(dtype_size(dtype));
  const int64_t scales = dtype == DType::i8 ? int64_t(spec.num_kv_heads) * int64_t(sizeof(float)) : 0;
  return int64_t(spec.num_layers) * 2 * (values + scales);
}

KvCache::KvCache(const models::KvSpec& spec, int num_blocks, int block_size, DType dtype)
    : num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  PRISM_CHECK(num_blocks > 0 && block_size > 0 && spec.num_layers > 0);
  const Dims shape{num_blocks, block_size, spec.num_kv_heads, spec.head_dim};
  layers_.resize(size_t(spec.num_layers));
  for (models::KvLayer& l : layers_) {
    l.k = Tensor::empty(shape, dtype);
    l.v = Tensor::empty(shape, dtype);
    if (dtype == DType::i8) {
      l.k_scale = Tensor::zeros({num_blocks, spec.num_kv_heads}, DType::f32);
      l.v_scale = Tensor::zeros({num_blocks, spec.num_kv_heads}, DType::f32);
    }
  }
  bytes_ = int64_t(num_blocks) * kv_bytes_per_block(spec, block_size, dtype);
}

void KvCache::copy_block(int src, int dst) {
  PRISM_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_);
  auto copy = [&](const Tensor& t) {
    if (!t.defined()) return;
    const size_t block_bytes = t.nbytes() / size_t(num_blocks_);
    auto* base = static_cast<std::byte*>(t.raw_data());
    std::memcpy(base + size_t(dst) * block_bytes, base + size_t(src) * block_bytes, block_bytes);
  };
  for (const models::KvLayer& l : layers_) {
    copy(l.k);
    copy(l.v);
    copy(l.k_scale);
    copy(l.v_scale);
  }
}

}  // namespace prism::engines::generate

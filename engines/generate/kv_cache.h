// engines/generate/kv_cache.h: the paged KV cache's memory: per layer K and V tensors of
// [num_blocks, block_size, Hkv, D] (f32, bf16 or i8 with per-(block, head) f32 scales), sized
// once at load from a byte budget. Block ids and sharing are kv_block_pool.h's; this file
// only sizes, allocates and copies blocks (copy on write of a shared partial block).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/decoder.h"
#include "runtime/dtype.h"
#include "runtime/ops.h"

namespace prism::engines::generate {

// Knob kv_cache_dtype: "auto" (f32 for f32 precision, else bf16) | "f32" | "bf16" | "int8".
Result<DType> parse_kv_cache_dtype(std::string_view name, ops::Precision precision);

// Bytes one block takes across every layer, K and V (and the i8 scales).
int64_t kv_bytes_per_block(const models::KvSpec& spec, int block_size, DType dtype);

class KvCache {
 public:
  KvCache() = default;
  // Allocates num_blocks blocks (uninitialised: pages are touched as blocks are first used).
  KvCache(const models::KvSpec& spec, int num_blocks, int block_size, DType dtype);

  const std::vector<models::KvLayer>& layers() const { return layers_; }
  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return bytes_; }

  // Copies block src's K/V (and scales) into block dst, in every layer.
  void copy_block(int src, int dst);

 private:
  std::vector<models::KvLayer> layers_;
  int num_blocks_ = 0;
  int block_size_ = 0;
  DType dtype_ = DType::f32;
  int64_t bytes_ = 0;
};

}  // namespace prism::engines::generate

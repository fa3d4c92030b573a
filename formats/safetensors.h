// safetensors: the Hugging Face weight format. A file is an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {...}}, then the raw bytes. Reading memory-maps the file and hands out zero-copy Tensors
// that keep the mapping alive. Every malformed input is a Status, never a crash.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::formats {

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  static Result<std::shared_ptr<const SafetensorsFile>> open(const std::string& path);

  // Names in file order of their offsets.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  // Zero-copy view in the stored dtype; keeps the mapping alive. The mapping is read-only:
  // never write through it. Bytes misaligned for their element size come back as a copy.
  Result<Tensor> get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;
  const std::string& path() const;

  ~SafetensorsFile();
  struct Impl;

 private:
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class PytorchCheckpoint;  // formats/pytorch_checkpoint.h

// All the weights of a model directory: model.safetensors, or the shards listed by
// model.safetensors.index.json ("weight_map": {tensor: file}); or one torch.save file. What
// models load from.
class WeightSource {
 public:
  // dir holds model.safetensors (preferred when both exist, as in transformers) or
  // model.safetensors.index.json, else diffusers' diffusion_pytorch_model.safetensors or its
  // .index.json; or the path of a .safetensors file, an index .json, or a
  // torch.save archive (.pth, .pt, pytorch_model.bin: told apart by its zip signature, read
  // by formats/pytorch_checkpoint.h's restricted unpickler, names flattened as it says).
  static Result<WeightSource> open(const std::string& dir_or_file);

  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // The tensor in its stored dtype (zero-copy).
  Result<Tensor> get(const std::string& name) const;
  // The tensor with its shape checked against `shape` (a clear error names both), converted
  // to `dtype` when it is stored as another float type (a copy only then).
  Result<Tensor> get(const std::string& name, const Dims& shape, DType dtype = DType::f32) const;

 private:
  std::map<std::string, std::shared_ptr<const SafetensorsFile>> by_name_;  // tensor -> file
  std::shared_ptr<const PytorchCheckpoint> checkpoint_;  // set instead of by_name_ for a torch.save file
};

// Writes tensors (any strides; written contiguous) in the given order with optional
// __metadata__; the header is padded with spaces to a multiple of 8 bytes. No padding goes
// between tensors, so order by element size (largest first) to keep reads zero-copy.
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// "F32" <-> DType::f32, "BF16", "F16", "I8", "U8", "I32", "I64", "F8_E4M3".
Result<DType> parse_safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(DType dtype);

}  // namespace prism::formats

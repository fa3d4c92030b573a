// models/common/weight_loading.h: reading checkpoint tensors the way several model families
// do: owned f32 copies, embedding tables kept in their stored 16-bit float type, nn.Linears
// stacked into one packed linear; plus the bytes a packed linear streams and the load error
// that names the directory. Names, layouts and anything one family alone does stay in that
// family's files; no forward pass here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/safetensors.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::models::common {

// NOTE: WeightSource hands out views of the mmap'd checkpoint that keep the whole file
// mapped. Every tensor a model keeps is copied out at load (linears are packed copies), so
// the mapping is released when loading ends and resident memory is the model's own copies,
// not those plus the touched pages of the file.

// The dtype to keep "<name>" in: the stored one when it is bf16 or f16 (float types that GEMMs
// and embedding take, so a 16-bit checkpoint is not widened to f32 at load: that would double
// load memory), f32 otherwise, and also when the tensor is missing (the shape-checked read
// that follows names it).
DType stored_float_dtype(const formats::WeightSource& src, const std::string& name);

// f32 owned copy of "<name>" with its shape checked (stored bf16 / f16 widened).
Result<Tensor> load_f32(const formats::WeightSource& src, const std::string& name, const Dims& shape);

// An owned copy of "<name>" with its shape checked, in stored_float_dtype (embedding tables),
// on the heap whatever arena is current.
Result<Tensor> load_table(const formats::WeightSource& src, const std::string& name, const Dims& shape);

// nn.Linears "<base_i>.weight" [out_i, in] (+ "<base_i>.bias" [out_i] f32 when with_bias)
// stacked along out into one packed linear: their outputs side by side, in order. The weights
// are read and stacked in `dtype`: f32, or the checkpoint's (stored_float_dtype) so a 16-bit
// checkpoint is not widened before packing.
Result<ops::LinearWeight> load_linear(const formats::WeightSource& src, const std::vector<std::string>& bases,
                                      const std::vector<int64_t>& outs, int64_t in, bool with_bias,
                                      ops::Precision precision, DType dtype = DType::f32);

// Bytes of a packed linear as one forward pass streams it (weights, scales, bias).
int64_t linear_bytes(const ops::LinearWeight& w);

// A load error with the directory in front ("<dir>: <message>"), code kept.
Status in_dir(const std::string& dir, const Status& s);

}  // namespace prism::models::common

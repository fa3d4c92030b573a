// formats/onnx.h: the weights of an ONNX model file — its graph initializers and the tensors
// of its Constant nodes, subgraphs (If / Loop branches) included — read straight from the
// protobuf wire format (formats/onnx.cpp says why not through libonnx's classes). Prism does
// not run ONNX graphs: a model family that ships as ONNX (Silero VAD) is written against
// runtime ops and takes its weights from here.
#pragma once

#include <map>
#include <string>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::formats {

struct OnnxWeights {
  // By name (an initializer's name, or a Constant node's output name with the `If` branch
  // prefixes the exporter added, as they are in the file). f32 and i64 tensors (others are
  // skipped); raw_data and the typed *_data fields both read. Owned copies.
  std::map<std::string, Tensor> tensors;
  int64_t ir_version = 0;
  int64_t opset = 0;
  std::string producer;
};

// not_found for a missing file; invalid_argument naming the file for one that is not ONNX
// ("is not an ONNX model: ..."), is over 1 GiB, keeps tensors in external files, or is
// corrupt ("is corrupt: tensor 'x' holds 3 values for shape [4]").
Result<OnnxWeights> read_onnx_weights(const std::string& path);

}  // namespace prism::formats

// engines/encode/embed_payload.h: the request and result an embeddings deployment passes
// between the api and its engine. Plain data: no tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "serving/request.h"

namespace prism::engines::encode {

struct EmbedInput final : serving::Payload {
  std::vector<std::vector<int32_t>> sequences;  // checked by EmbedFrontend (length, vocabulary)
  int64_t dims = 0;                             // 0: the model's; checked by EmbedFrontend
};

struct EmbedOutput final : serving::Payload {
  int64_t dims = 0;
  std::vector<float> vectors;  // [sequences * dims] row-major, in input order
};

}  // namespace prism::engines::encode

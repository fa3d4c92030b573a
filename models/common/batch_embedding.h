// models/common/batch_embedding.h: a decoder's input rows for one flat batch: token
// embeddings, with the rows of batch.input_embeddings where the token id is -1 (what an input
// stage put there: a VLM's media rows; models/decoder.h). Shared by the decoder families; it
// adds nothing family-specific (positions, scaling) and must not.
#pragma once

#include <cstdint>

#include "models/decoder.h"
#include "runtime/tensor.h"

namespace prism::models::common {

// table: [vocab, hidden] (f32, bf16 or f16: ops::embedding); batch.token_ids: [T] i32, -1 where
// batch.input_embeddings ([T, hidden] f32, then required) supplies the row. Returns [T, hidden]
// f32 in the current arena.
Tensor embed_batch(const Tensor& table, const DecoderBatch& batch, int64_t hidden);

}  // namespace prism::models::common

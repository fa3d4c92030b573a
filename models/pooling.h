// models/pooling.h: token states to one vector per sequence (sentence-transformers' configs::Pooling
// and Normalize modules), over the Encoder's flat batch. Arithmetic only: which mode a model
// uses is configs/sentence_embedding.h's business.
#pragma once

#include "configs/sentence_embedding.h"
#include "models/encoder.h"
#include "runtime/tensor.h"

namespace prism::models {

// hidden: [T, H] f32 (Encoder::encode's result for `batch`). Returns [S, H] f32 from the
// current arena: cls = the sequence's first token; mean = the average of its real tokens;
// last_token = its last real token. With batch.kv_lens set, slot s holds kv_lens[s] real
// tokens followed by padding, which no mode reads. Every sequence must have a real token.
Tensor pool(const Tensor& hidden, const EncoderBatch& batch, configs::Pooling pooling);

// In place over the rows of x ([S, D] f32, rows contiguous): x / max(||x||, 1e-12), as
// torch.nn.functional.normalize, so an all-zero row stays zero.
void l2_normalize_rows(Tensor& x);

}  // namespace prism::models

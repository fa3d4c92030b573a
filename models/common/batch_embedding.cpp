// models/common/batch_embedding.cpp: token embeddings with spliced input rows.
#include "models/common/batch_embedding.h"

#include "base/check.h"
#include "runtime/ops.h"

namespace prism::models::common {

Tensor embed_batch(const Tensor& table, const DecoderBatch& batch, int64_t hidden) {
  const Tensor& ids = batch.token_ids;
  const int64_t t = ids.size(0);
  const int32_t* pid = ids.data<int32_t>();
  int64_t num_spliced = 0;
  for (int64_t i = 0; i < t; ++i) num_spliced += pid[i] == -1;
  if (num_spliced == 0) return ops::embedding(table, ids);
  const Tensor& e = batch.input_embeddings;
  PRISM_CHECK_MSG(e.defined() && e.dim() == 2 && e.size(0) == t && e.size(1) == hidden,
                  "forward: token id -1 needs input_embeddings [T, hidden_size]");
  Tensor safe_ids = Tensor::empty({t}, DType::i32);
  int32_t* sid = safe_ids.data<int32_t>();
  for (int64_t i = 0; i < t; ++i) sid[i] = pid[i] == -1 ? 0 : pid[i];
  Tensor x = ops::embedding(table, safe_ids);
  for (int64_t i = 0; i < t; ++i)
    if (pid[i] == -1) x.select(0, i).copy_from(e.select(0, i));
  return x;
}

}  // namespace prism::models::common

// models/bert/bert.h: BERT-family encoders (BERT, XLM-RoBERTa, and the embedders built on
// them) behind the Encoder interface. Loads a Hugging Face directory by its real parameter
// names ("embeddings.word_embeddings.weight", "encoder.layer.{i}.attention.self.query.weight",
// ..., with or without the "bert."/"roberta." prefix of *ForMaskedLM checkpoints, whose head
// tensors are ignored) and computes the last hidden states with runtime ops. configs::Pooling is not
// the model's: see models/pooling.h.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "configs/bert_config.h"
#include "models/encoder.h"
#include "runtime/ops.h"

namespace prism::models {

// dir: a model directory (config.json + model.safetensors or a sharded index). precision
// applies to the linear layers; embeddings and LayerNorms stay f32. Errors: the config's
// (configs::BertConfig::from_hf), a missing tensor (not_found naming it) or a misshapen one
// (invalid_argument naming it and both shapes).
Result<std::unique_ptr<Encoder>> load_bert(const std::string& dir, ops::Precision precision);

}  // namespace prism::models

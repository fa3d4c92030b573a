// configs/bert_config.h: the config.json of a BERT-family encoder (BERT and XLM-RoBERTa,
// and the sentence-transformers models built on them: MiniLM, BGE, E5, GTE, multilingual-E5,
// bge-m3), typed and validated. Hyper-parameters only: no weights, no pooling policy
// (configs/sentence_embedding.h reads that).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "configs/activation.h"
#include "configs/hf_config.h"

namespace prism::configs {

struct BertConfig {
  std::string model_type;  // "bert" | "xlm-roberta"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t type_vocab_size = 2;
  int64_t pad_token_id = 0;
  double layer_norm_eps = 1e-12;
  std::string hidden_act = "gelu";  // as written in config.json
  Activation activation = Activation::gelu_erf;  // hidden_act resolved (never quick_gelu)
  // The position id of a sequence's first token. XLM-R numbers positions after its padding
  // index (HF's create_position_ids_from_input_ids): pad_token_id + 1; BERT: 0.
  int64_t position_offset = 0;

  // invalid_argument / not_found naming the key for a bad or missing value; unimplemented
  // for a model_type, hidden_act or position_embedding_type Prism does not run.
  static Result<BertConfig> from_hf(const HfConfig& hf);
  // dir/config.json, or a .json path.
  static Result<BertConfig> load(const std::string& dir_or_file);
  Status validate() const;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The longest sequence, special tokens included: the positions the table holds past the offset.
  int64_t max_tokens() const { return max_position_embeddings - position_offset; }
};

}  // namespace prism::configs

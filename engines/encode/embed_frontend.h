// engines/encode/embed_frontend.h: what an embeddings deployment knows before any replica
// runs: its tokenizer, limits, output dimensions and embedding space. Shared read-only by the
// api's I/O threads (which tokenize, in parallel, off the model's threads) and every replica.
// It holds no tensors: api/ includes this header without seeing runtime/ or models/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/sentence_embedding.h"
#include "serving/config.h"
#include "serving/engine.h"
#include "text/tokenizer.h"

namespace prism::engines::encode {

using models::Pooling;

class EmbedFrontend final : public serving::Frontend {
 public:
  // model_dir: a Hugging Face directory of a supported encoder family. Knobs it reads
  // (invalid_argument naming any other knob): pooling = "cls"|"mean"|"last_token" and
  // normalize = bool (override the model's own files), matryoshka_dims = "768,512,256"
  // (overrides config.json's "matryoshka_dimensions"), search_index = DIR (read by the
  // search route), packing = bool, bulk_chunk_tokens = int (read by the engine).
  static Result<std::shared_ptr<const EmbedFrontend>> load(const std::string& model_dir,
                                                           const serving::Knobs& knobs = {});

  // NOTE: the messages of tokenize() and check_ids() are predicates without a subject
  // ("has 700 tokens, more than this model's maximum of 512 (set truncate to cut it)", "is
  // empty"): the caller names the input ("input[3] " + message, "document 17 " + message).

  // Token ids of one text, special tokens included. Longer than max_tokens(): invalid_argument
  // that gives both numbers, unless `truncate` (then cut to max_tokens(), keeping the start
  // and the closing special token, e.g. [SEP] or </s>). Empty text: invalid_argument.
  Result<std::vector<int32_t>> tokenize(std::string_view text, bool truncate) const;
  // A token-array input, taken as given (no special tokens added), checked: non-empty, every
  // id in [0, vocab_size()), length as above. Truncation keeps the start, and the last id
  // when it is the tokenizer's closing special token.
  Result<std::vector<int32_t>> check_ids(std::span<const int64_t> ids, bool truncate) const;
  // The same checks on ids already narrowed (engines re-check payloads before the model).
  Status check_sequence(std::span<const int32_t> ids) const;

  // dims requested by a client (0: the model's). invalid_argument when negative, above
  // dims() (giving both numbers) or, for a model that declares its Matryoshka sizes, neither
  // dims() nor one of them (listing them).
  Status check_dimensions(int64_t dims) const;

  const std::string& model_dir() const { return model_dir_; }
  const std::string& family() const { return family_; }  // "bert", "xlm-roberta", ...
  const text::Tokenizer& tokenizer() const { return tokenizer_; }
  // The longest input: max_position_embeddings (less the XLM-R offset), capped by
  // sentence_bert_config.json's max_seq_length when the model has one.
  int64_t max_tokens() const { return max_tokens_; }
  int64_t dims() const { return dims_; }
  int64_t vocab_size() const { return vocab_size_; }  // rows of the model's embedding table
  int32_t pad_id() const { return pad_id_; }          // fills padded slots (never attended)
  const std::vector<int64_t>& matryoshka_dims() const { return matryoshka_dims_; }  // empty: any <= dims
  Pooling pooling() const { return pooling_; }
  bool normalize() const { return normalize_; }
  // Hex XXH3-128 of the config, pooling, normalisation and weight bytes: vectors of two
  // deployments are comparable only when their space ids match. Precision is left out on
  // purpose: bf16/int8 vectors approximate the f32 ones of the same space. The weights
  // hashed are the files the model loads (model.safetensors, else the shards its index
  // names, in name order), so a stray *.safetensors beside them changes nothing.
  const std::string& space_id() const { return space_id_; }
  const serving::Knobs& knobs() const { return knobs_; }

 private:
  std::string model_dir_;
  std::string family_;
  text::Tokenizer tokenizer_;
  int64_t max_tokens_ = 0;
  int64_t dims_ = 0;
  int64_t vocab_size_ = 0;
  int32_t pad_id_ = 0;
  std::optional<text::TokenId> closing_id_;  // [SEP] or </s>: kept by truncation
  std::vector<int64_t> matryoshka_dims_;
  Pooling pooling_ = Pooling::mean;
  bool normalize_ = false;
  std::string space_id_;
  serving::Knobs knobs_;
};

}  // namespace prism::engines::encode

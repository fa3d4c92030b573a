// Pipeline: the Hugging Face tokenizers pipeline as a TokenizerBackend — added tokens, then
// normalizer, pre-tokenizer, model, post-processor; decoder for the way back. Built from
// tokenizer.json or the legacy vocab layouts; immutable afterwards.
#pragma once

#include <memory>
#include <unordered_set>
#include <vector>

#include "text/added_tokens.h"
#include "text/decoders.h"
#include "text/normalizers.h"
#include "text/post_processors.h"
#include "text/pre_tokenizers.h"
#include "text/token_model.h"
#include "text/tokenizer_backend.h"

namespace prism::text {

struct PipelineParts {
  std::unique_ptr<TokenModel> model;  // required
  std::vector<AddedToken> added_tokens;
  std::unique_ptr<Normalizer> normalizer;          // each of these may be null: skipped
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;                // null: tokens joined with ' '
};

class Pipeline : public TokenizerBackend {
 public:
  explicit Pipeline(PipelineParts parts);

  void encode(std::string_view text, std::vector<TokenId>& ids) const override;
  size_t num_special_tokens(bool pair) const override;
  void post_process(std::vector<Encoding>& encodings, bool add_special_tokens) const override;
  Result<std::string> decode(std::span<const TokenId> ids, bool skip_special_tokens) const override;
  std::optional<TokenId> token_to_id(std::string_view token) const override;
  std::string id_to_token(TokenId id) const override;
  int32_t vocab_size() const override;
  bool is_special(TokenId id) const override;

 private:
  // Normalises, pre-tokenizes and models one stretch of text with no raw added token in it.
  void encode_segment(std::string_view text, size_t offset, std::vector<TokenId>& ids) const;

  PipelineParts parts_;
  AddedVocabulary added_;
};

}  // namespace prism::text

// TokenModel: the model stage of a tokenizer — one pre-tokenized piece in, token ids out.
// WordPiece, BPE (byte-level and SentencePiece-style) and Unigram implement it. Normalising,
// pre-tokenizing, added tokens, post-processing and decoding are the pipeline's
// (text/tokenizer.h), never a model's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace prism::text {

using TokenId = int32_t;

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one piece: normalised UTF-8 already split by the pre-tokenizer (for
  // byte-level BPE, already mapped to the byte alphabet, e.g. " the" -> "Ġthe").
  // Thread-safe: const, no shared mutable state (caches must be thread-safe).
  virtual void tokenize(std::string_view piece, std::vector<TokenId>& out) const = 0;
  virtual std::optional<TokenId> token_to_id(std::string_view token) const = 0;
  // The vocabulary string of id; empty when id is out of range.
  virtual std::string_view id_to_token(TokenId id) const = 0;
  virtual int32_t vocab_size() const = 0;
};

struct WordPieceConfig {
  std::vector<std::pair<std::string, TokenId>> vocab;
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  int max_input_chars_per_word = 100;
};

struct BpeConfig {
  std::vector<std::pair<std::string, TokenId>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in priority order (rank = index)
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;  // unknown bytes -> "<0xAB>" tokens (SentencePiece style)
  bool ignore_merges = false;  // a piece that is itself in the vocab is one token (Llama 3)
};

struct UnigramConfig {
  std::vector<std::pair<std::string, double>> vocab;  // piece, log-probability score; id = index
  std::optional<TokenId> unk_id;
  bool byte_fallback = false;
};

// Each returns invalid_argument naming the problem (duplicate piece, merge of unknown
// tokens, unk token missing from the vocab, ...).
Result<std::unique_ptr<TokenModel>> make_wordpiece(WordPieceConfig config);
Result<std::unique_ptr<TokenModel>> make_bpe(BpeConfig config);
Result<std::unique_ptr<TokenModel>> make_unigram(UnigramConfig config);

}  // namespace prism::text

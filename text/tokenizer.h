// Tokenizer: text <-> token ids for every model Prism serves, loaded from a Hugging Face
// tokenizer.json, a SentencePiece .model, or the older vocab.txt / vocab.json + merges.txt
// layouts. Immutable after load and cheap to copy (shared state); encode/decode are const and
// thread-safe. It must not know about models, requests or chat templates.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/encoding.h"
#include "text/token_model.h"

namespace prism::text {

enum class TruncationStrategy { longest_first, only_first, only_second };
enum class Direction { left, right };

struct TruncationConfig {
  size_t max_length = 512;  // special tokens included
  TruncationStrategy strategy = TruncationStrategy::longest_first;
  Direction direction = Direction::right;  // right: keep the start
  size_t stride = 0;  // parsed; overflowing windows are not produced
};

enum class PaddingStrategy { batch_longest, fixed };

struct PaddingConfig {
  PaddingStrategy strategy = PaddingStrategy::batch_longest;
  size_t fixed_length = 0;  // strategy fixed only
  Direction direction = Direction::right;
  TokenId pad_id = 0;
  int32_t pad_type_id = 0;
  std::string pad_token = "[PAD]";
  std::optional<size_t> pad_to_multiple_of;
};

// Ids of the well-known special tokens, where the tokenizer has them.
struct SpecialTokenIds {
  std::optional<TokenId> bos, eos, pad, unk, cls, sep, mask;
};

class TokenizerBackend;  // text/tokenizer_backend.h

class Tokenizer {
 public:
  // path: a directory (tokenizer.json, else tokenizer.model, else vocab.json + merges.txt,
  // else vocab.txt) or one of those files. not_found lists what was looked for.
  static Result<Tokenizer> load(const std::string& path);
  // The content of a tokenizer.json.
  static Result<Tokenizer> from_json(std::string_view json);

  // Invalid UTF-8 in text is repaired first (each bad sequence -> U+FFFD, as HF does).
  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  Encoding encode_pair(std::string_view a, std::string_view b, bool add_special_tokens = true) const;
  // Encodes in parallel on the OpenMP pool; padding (batch_longest) spans the whole batch.
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens = true) const;
  // out_of_range naming the first id that is not in the vocabulary.
  Result<std::string> decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  std::string id_to_token(TokenId id) const;  // empty when id is out of range
  int32_t vocab_size() const;  // added tokens included
  const SpecialTokenIds& special_token_ids() const { return special_; }

  // As read from tokenizer.json (or none); callers may override them.
  const std::optional<TruncationConfig>& truncation() const { return truncation_; }
  const std::optional<PaddingConfig>& padding() const { return padding_; }
  void set_truncation(std::optional<TruncationConfig> t) { truncation_ = std::move(t); }
  void set_padding(std::optional<PaddingConfig> p) { padding_ = std::move(p); }

 private:
  Encoding encode_parts(std::string_view a, const std::string_view* b, bool add_special_tokens) const;
  void truncate(std::vector<Encoding>& parts, bool add_special_tokens) const;
  void pad(std::span<Encoding> batch) const;

  std::shared_ptr<const TokenizerBackend> backend_;  // shared by copies; immutable
  std::optional<TruncationConfig> truncation_;
  std::optional<PaddingConfig> padding_;
  SpecialTokenIds special_;
};

}  // namespace prism::text

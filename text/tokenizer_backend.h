// TokenizerBackend: what a Tokenizer delegates to — the Hugging Face component pipeline
// (text/pipeline.h) or SentencePiece. Internal to text/: callers use Tokenizer. Truncation and
// padding are the Tokenizer's, the same for every backend.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.h"
#include "base/status.h"
#include "text/encoding.h"
#include "text/tokenizer.h"

namespace prism::text {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Ids of one text (valid UTF-8), no special tokens around it. Const, thread-safe.
  virtual void encode(std::string_view text, std::vector<TokenId>& ids) const = 0;
  virtual size_t num_special_tokens(bool pair) const = 0;
  // One or two encodings in; special tokens added; may merge them (see PostProcessor).
  virtual void post_process(std::vector<Encoding>& encodings, bool add_special_tokens) const = 0;
  virtual Result<std::string> decode(std::span<const TokenId> ids, bool skip_special_tokens) const = 0;
  virtual std::optional<TokenId> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(TokenId id) const = 0;
  virtual int32_t vocab_size() const = 0;
  // Whether id is a special token (skipped by decode with skip_special_tokens).
  virtual bool is_special(TokenId id) const = 0;
};

struct LoadedTokenizer {
  std::unique_ptr<TokenizerBackend> backend;
  std::optional<TruncationConfig> truncation;
  std::optional<PaddingConfig> padding;
};

// tokenizer_json.cpp: the content of a tokenizer.json.
Result<LoadedTokenizer> load_tokenizer_json(std::string_view json);
// legacy_vocab.cpp: BERT vocab.txt (WordPiece), GPT-2 vocab.json + merges.txt (byte-level BPE).
Result<LoadedTokenizer> load_bert_vocab(const std::string& vocab_txt_path, bool lowercase);
Result<LoadedTokenizer> load_gpt2_vocab(const std::string& vocab_json_path, const std::string& merges_txt_path);
// sentencepiece_tokenizer.cpp: a SentencePiece .model.
Result<LoadedTokenizer> load_sentencepiece(const std::string& model_path);

}  // namespace prism::text

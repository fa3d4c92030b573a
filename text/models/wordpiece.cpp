// WordPiece (BERT): greedy longest-match-first from the start of the word, continuation
// pieces spelled with the prefix ("##"). Matches HF tokenizers exactly: a word with any
// unmatchable position, or longer than max_input_chars_per_word characters, is one unk.
// It sees one pre-tokenized word; it must not normalise or split.
#include <algorithm>
#include <string>

#include "text/models/model_common.h"
#include "text/token_model.h"

namespace prism::text {
namespace {

using models::StringIdMap;

class WordPiece final : public models::VocabularyModel {
 public:
  WordPiece(WordPieceConfig config, StringIdMap vocab, std::vector<std::string> by_id, TokenId unk_id)
      : VocabularyModel(std::move(vocab), std::move(by_id)),
        config_(std::move(config)),
        unk_id_(unk_id) {
    for (const auto& [token, id] : vocab_) max_token_bytes_ = std::max(max_token_bytes_, token.size());
  }

  // NOTE: HF tries ends from the word's end backwards one character at a time; ends farther
  // than the longest vocabulary token cannot match, so starting at that bound (moved back to
  // a character boundary) visits the same matching ends in the same order.
  void tokenize(std::string_view word, std::vector<TokenId>& out) const override {
    if (word.empty()) return;
    if (count_chars(word) > static_cast<size_t>(config_.max_input_chars_per_word)) {
      out.push_back(unk_id_);
      return;
    }
    thread_local std::string candidate;  // prefix + word[start, end): reused, no allocation
    const std::string& prefix = config_.continuing_subword_prefix;
    size_t first_out = out.size();
    size_t start = 0;
    while (start < word.size()) {
      size_t end = std::min(word.size(), start + max_token_bytes_);
      while (end > start && end < word.size() && is_continuation(word[end])) --end;
      TokenId found = -1;
      while (end > start) {
        std::string_view sub = word.substr(start, end - start);
        std::optional<TokenId> id;
        if (start == 0) {
          id = models::find_id(vocab_, sub);
        } else {
          candidate.assign(prefix).append(sub);
          id = models::find_id(vocab_, candidate);
        }
        if (id) {
          found = *id;
          break;
        }
        do --end;
        while (end > start && is_continuation(word[end]));
      }
      if (found < 0) {
        out.resize(first_out);
        out.push_back(unk_id_);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }


 private:
  static bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }
  static size_t count_chars(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += !is_continuation(c);
    return n;
  }

  WordPieceConfig config_;  // vocab moved out into vocab_/by_id_
  TokenId unk_id_;
  size_t max_token_bytes_ = 0;  // longest vocabulary string, prefix included
};

}  // namespace

Result<std::unique_ptr<TokenModel>> make_wordpiece(WordPieceConfig config) {
  StringIdMap vocab;
  std::vector<std::string> by_id;
  PRISM_RETURN_IF_ERROR(models::build_vocab(config.vocab, vocab, by_id));
  std::optional<TokenId> unk = models::find_id(vocab, config.unk_token);
  if (!unk) return invalid_argument("wordpiece: unk token '" + config.unk_token + "' is not in the vocabulary");
  if (config.max_input_chars_per_word < 0) return invalid_argument("wordpiece: negative max_input_chars_per_word");
  config.vocab.clear();
  config.vocab.shrink_to_fit();
  return std::unique_ptr<TokenModel>(
      std::make_unique<WordPiece>(std::move(config), std::move(vocab), std::move(by_id), *unk));
}

}  // namespace prism::text

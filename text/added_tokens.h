// Added tokens (tokenizer.json "added_tokens"): strings matched whole in the input before the
// model sees it, special ones ([CLS], <|endoftext|>) and user-added ones. Matching is
// leftmost-longest over a byte trie, with HF's lstrip / rstrip / single_word rules; tokens
// with normalized=true are matched on normalised text in a second pass.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/normalizers.h"
#include "text/token_model.h"

namespace prism::text {

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool single_word = false;  // only where no word character touches it
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = true;    // matched on normalised text
};

// A stretch of input: either text still to tokenize, or one added token.
struct Segment {
  std::string_view text;  // into the string given to split
  std::optional<TokenId> token;
  size_t offset = 0;  // byte offset in that string
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // normalizer (may be null, not kept): normalises the patterns of normalized=true tokens.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Cuts text at the tokens of one pass (normalized=false tokens on raw text, normalized=true
  // ones on normalised text). Segments cover text in order; empty text segments are dropped.
  void split(std::string_view text, bool normalized_pass, std::vector<Segment>& out) const;

  const AddedToken* find(TokenId id) const;
  std::optional<TokenId> token_to_id(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  // Byte trie of one pass's patterns.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t token = -1;  // index into tokens_ ending here
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // The longest pattern starting at text[pos]: {length, token index}, or token -1.
    std::pair<size_t, int32_t> longest(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<TokenId, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_, normalized_;
};

}  // namespace prism::text

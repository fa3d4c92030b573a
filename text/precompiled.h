// SentencePiece's compiled normalisation rules ("precompiled_charsmap": T5, mT5, XLM-R,
// ALBERT, multilingual-e5, bge-m3, ...) read in place: a darts-clone double-array trie from
// UTF-8 keys to offsets into a pool of NUL-terminated replacements. PrecompiledNormalizer
// applies them with Hugging Face's semantics (not SentencePiece's: see its NOTE). This file
// only reads the blob; it never builds or rewrites one.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/normalizers.h"

namespace prism::text {

// The rule table of a precompiled_charsmap blob: a little-endian u32 trie size in bytes, the
// trie (u32 darts-clone units), then the replacement pool.
class CharsMap {
 public:
  // invalid_argument when the blob is too short or the trie size does not fit. An empty blob
  // is a table without rules.
  static Result<CharsMap> parse(std::string_view blob);

  // The replacement of the shortest rule whose key is a prefix of `key` (HF's transform).
  std::optional<std::string_view> shortest_prefix(std::string_view key) const;
  // The longest such rule (SentencePiece's NormalizePrefix): its key length, 0 when none.
  size_t longest_prefix(std::string_view key, std::string_view& replacement) const;
  bool empty() const { return units_.empty(); }

 private:
  // Walks the trie along key, calling on_match(length, value) for every rule key that is a
  // prefix of key, shortest first, until it returns false.
  template <class OnMatch>
  void common_prefix_search(std::string_view key, OnMatch&& on_match) const;
  std::optional<std::string_view> replacement_at(uint32_t offset) const;

  std::vector<uint32_t> units_;  // darts-clone double array
  std::string pool_;             // replacements, each NUL-terminated
};

// tokenizer.json {"type": "Precompiled"}. NOTE: HF's rule, kept bug for bug because ids must
// match HF: the input is cut into extended grapheme clusters; a cluster shorter than 6 bytes
// that has a rule for some prefix is replaced whole by the SHORTEST such rule's replacement;
// otherwise each character is replaced by its own rule, or kept.
class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(CharsMap map);
  void normalize(std::string& text) const override;

 private:
  CharsMap map_;
  // ASCII characters alone in their cluster (the common case): the replacement, or none.
  std::array<std::optional<std::string>, 128> ascii_;
};

// Decodes standard base64 (RFC 4648, '=' padding optional). invalid_argument on a bad character.
Result<std::string> base64_decode(std::string_view text);

}  // namespace prism::text

// Normalizers: the first stage of the tokenizer pipeline, rewriting a piece of raw text in
// place before pre-tokenization (Hugging Face tokenizers' semantics, component by component).
// They do not split, and they keep no offsets alignment (Encoding has no offsets).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/regex.h"

namespace prism::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // text: valid UTF-8 in, valid UTF-8 out. Const and thread-safe.
  virtual void normalize(std::string& text) const = 0;
};

enum class UnicodeForm { nfc, nfd, nfkc, nfkd };

// Full lowercase mapping per code point (Rust's char::to_lowercase).
class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  void normalize(std::string& text) const override;

 private:
  UnicodeForm form_;
};

// Drops combining marks (Mn, Mc, Me). Does not decompose: pipelines put NFD before it.
class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

struct BertNormalizerConfig {
  bool clean_text = true;            // drop NUL, U+FFFD and controls; whitespace -> ' '
  bool handle_chinese_chars = true;  // spaces around CJK ideographs
  std::optional<bool> strip_accents;  // null: follows lowercase
  bool lowercase = true;
};

class BertNormalizer : public Normalizer {
 public:
  explicit BertNormalizer(BertNormalizerConfig config) : config_(config) {}
  void normalize(std::string& text) const override;

 private:
  BertNormalizerConfig config_;
};

// Replaces every match of a pattern (a literal or a regex, both compiled to a Regex).
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override;

 private:
  Regex pattern_;
  std::string content_;
};

// Prepends a string to non-empty text.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& text) const override;

 private:
  std::string prepend_;
};

// Strips Unicode whitespace from the left and/or right end.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override;

 private:
  bool left_, right_;
};

// SentencePiece's NMT cleanup (HF "Nmt"): drops some C0/C1 controls, maps tab, newlines,
// zero-width and separator characters (and U+2581, U+FEFF, U+FFFD) to ' '.
class NmtNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override;

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Replaces every match of `pattern` in text with `content` (shared by the Replace normalizer
// and decoder).
std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content);

}  // namespace prism::text

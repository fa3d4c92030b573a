// Pre-tokenizers: the second pipeline stage, splitting normalised text into the pieces the
// model tokenizes one at a time (Hugging Face tokenizers' semantics). They may rewrite a
// piece's characters (ByteLevel's byte alphabet, Metaspace's "▁") but never see ids.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "text/regex.h"

namespace prism::text {

struct Piece {
  std::string text;
  // Byte offset of the piece in the text the pipeline is encoding; only "== 0" matters
  // (Metaspace's prepend_scheme "first" prepends to the very first piece alone).
  size_t offset = 0;
};

// Where a pre-tokenizer sends its pieces, in order: a non-owning reference to a callable
// void(std::string_view text, size_t offset). text is valid only during the call (it may
// point into a per-thread buffer), so the receiver uses it at once: this is how the pipeline
// tokenizes a long document without holding a list of its pieces.
class PieceSink {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, PieceSink>>>
  PieceSink(F&& f)  // NOLINT: implicit, so a lambda can be passed directly
      : ctx_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* c, std::string_view t, size_t o) { (*static_cast<std::remove_reference_t<F>*>(c))(t, o); }) {}
  void operator()(std::string_view text, size_t offset) const { call_(ctx_, text, offset); }

 private:
  void* ctx_;  // not owned: the callable outlives the sink (a temporary lives for the call)
  void (*call_)(void*, std::string_view, size_t);
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits one piece (at byte `offset` of the text being encoded) and passes every non-empty
  // result to sink, in order. Const and thread-safe; reuses per-thread buffers.
  virtual void split(std::string_view text, size_t offset, const PieceSink& sink) const = 0;
  // Every piece replaced by its splits (tests and tools; the pipeline streams with split).
  void pre_tokenize(std::vector<Piece>& pieces) const;
};

// What happens to the matched delimiters when a piece is split (HF SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Whitespace removed, then every punctuation character isolated.
class BertPreTokenizer : public PreTokenizer {
 public:
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;
};

// GPT-2 byte-level: optional leading space, the GPT-2 split regex, then every byte mapped to
// its printable stand-in ("Ġ" for space).
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  static Result<std::unique_ptr<ByteLevelPreTokenizer>> create(bool add_prefix_space, bool use_regex);
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  bool add_prefix_space_ = false;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

enum class PrependScheme { always, first, never };

// SentencePiece-style: ' ' -> replacement ("▁"), a leading replacement per prepend scheme, and
// optionally a split before every replacement.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  std::string replacement_;  // one character, UTF-8
  PrependScheme scheme_;
  bool split_;
};

// Splits on a pattern (a literal or a regex), keeping or dropping the matches per behavior;
// invert swaps matches and the text between them.
class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// Digits isolated one by one (individual_digits) or as contiguous runs.
class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual_digits) : individual_(individual_digits) {}
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  bool individual_;
};

// Punctuation characters split off per behavior (default isolated).
class PunctuationPreTokenizer : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(SplitBehavior behavior) : behavior_(behavior) {}
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  SplitBehavior behavior_;
};

// Keeps the matches of \w+|[^\w\s]+.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  static Result<std::unique_ptr<WhitespacePreTokenizer>> create();
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  std::unique_ptr<Regex> regex_;
};

// Splits on Unicode whitespace, dropping it.
class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;
};

// Splits on one delimiter character, dropping it.
class CharDelimiterSplitPreTokenizer : public PreTokenizer {
 public:
  explicit CharDelimiterSplitPreTokenizer(char32_t delimiter) : delimiter_(delimiter) {}
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  char32_t delimiter_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::string_view text, size_t offset, const PieceSink& sink) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// GPT-2's split regex (HF ByteLevel use_regex).
inline constexpr const char* kGpt2SplitPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// GPT-2's byte alphabet: byte b <-> a printable code point, UTF-8 encoded.
const std::array<std::string, 256>& byte_to_unicode();
// The byte a byte-alphabet code point stands for; -1 when cp is not in the alphabet.
int unicode_to_byte(char32_t cp);

}  // namespace prism::text

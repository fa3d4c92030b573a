// engines/generate/detokenizer.h: a choice's text as its tokens arrive. Decoding token by
// token is wrong (byte-level BPE splits characters across tokens; SentencePiece drops a
// leading space at the start of a decode), so each step decodes a short window and emits what
// it adds. Text that could still become a stop string, and incomplete UTF-8, are held back
// until they are settled; a stop string ends the text before it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace prism::engines::generate {

class IncrementalDetokenizer {
 public:
  // tokenizer: outlives this object. prompt_tail: the last few prompt tokens (context for the
  // first output token's leading space). stop: stop strings (may be empty), looked for only
  // in the text of output tokens after the first min_tokens (SamplingParams::min_tokens).
  IncrementalDetokenizer(const text::Tokenizer& tokenizer, std::span<const int32_t> prompt_tail,
                         std::vector<std::string> stop, bool skip_special_tokens = true, int min_tokens = 0);

  struct Step {
    std::string text;      // newly settled text (may be empty)
    bool stopped = false;  // a stop string appeared: text ends before it, nothing follows
  };
  // Adds one output token.
  Step push(int32_t token);
  // The choice finished for another reason: the held-back text (no stop string in it).
  std::string finish();

  const std::string& text() const { return emitted_; }  // everything emitted so far

 private:
  const text::Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  bool skip_special_;
  int min_tokens_;
  int num_pushed_ = 0;
  // Decodes tokens_[prefix_offset_, end) (false: an id the tokenizer does not know).
  bool decode_window(size_t end, std::string& out) const;
  // Adds settled text; a stop string ends it. Returns the text now safe to emit.
  Step settle(std::string text, bool final);

  std::vector<int32_t> tokens_;  // context window + output
  // NOTE: tokens_[prefix_offset_, read_offset_) decode to text already accounted for (it
  // gives the next tokens their context); the window's text past it, up to window_emitted_
  // bytes, is too. Offsets move only when the window's text ends on a whole character.
  size_t prefix_offset_ = 0, read_offset_ = 0;
  size_t window_emitted_ = 0;
  std::string pending_;  // decoded but held back (possible stop-string prefix)
  std::string emitted_;
  bool stopped_ = false;   // a stop string was found, or finish() ran
};

}  // namespace prism::engines::generate

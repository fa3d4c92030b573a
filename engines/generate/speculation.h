// engines/generate/speculation.h: draft tokens for speculative decoding. A Drafter proposes
// up to k tokens that likely follow a sequence; the engine verifies them all in one forward
// pass (SequenceSampler::verify), so output is unchanged and accepted drafts are free
// decode steps. Prompt lookup (n-gram matching against the sequence's own tokens) needs no
// second model; a draft model can implement the same interface later (it would be given its
// own KV cache by the engine; propose() stays per sequence).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::engines::generate {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens draft tokens to follow `tokens` (prompt and output so far); may be empty.
  virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) = 0;
};

// Prompt lookup: find the most recent earlier occurrence of the sequence's last n tokens
// (n from max_ngram down to min_ngram) and propose the tokens that followed it.
class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int min_ngram, int max_ngram);
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) override;

 private:
  int min_ngram_, max_ngram_;
};

// "none" → null, "ngram" → NgramDrafter(min_ngram, max_ngram); invalid_argument otherwise.
Result<std::unique_ptr<Drafter>> make_drafter(std::string_view kind, int min_ngram, int max_ngram);

}  // namespace prism::engines::generate

// engines/generate/speculation.cpp: prompt-lookup drafting. Text often repeats its own
// context (code edits, quoting, summaries, lists): when the last n tokens occurred before,
// what followed them then is a good guess for what follows now, and verification makes a
// wrong guess cost only the extra rows of one forward pass.
#include "engines/generate/speculation.h"

#include <algorithm>
#include <string>

namespace prism::engines::generate {

NgramDrafter::NgramDrafter(int min_ngram, int max_ngram) : min_ngram_(min_ngram), max_ngram_(max_ngram) {}

// NOTE: longer n-grams are tried first (a longer match predicts better); for one n the most
// recent earlier occurrence wins (the nearest context is the likeliest to continue the same
// way). The continuation stops at the end of the sequence, so it is never empty.
std::vector<int32_t> NgramDrafter::propose(std::span<const int32_t> tokens, int max_tokens) {
  const auto size = int64_t(tokens.size());
  if (max_tokens <= 0) return {};
  for (int n = std::min<int64_t>(max_ngram_, size - 1); n >= std::max(min_ngram_, 1); --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size_t(size - n));
    // An occurrence starting at j ends before the suffix starts: j + n <= size - 1.
    for (int64_t j = size - n - 1; j >= 0; --j) {
      if (tokens[size_t(j)] != suffix[0]) continue;
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
      const int64_t begin = j + n;
      const int64_t end = std::min(size, begin + max_tokens);
      return {tokens.begin() + begin, tokens.begin() + end};
    }
  }
  return {};
}

Result<std::unique_ptr<Drafter>> make_drafter(std::string_view kind, int min_ngram, int max_ngram) {
  if (kind == "none") return std::unique_ptr<Drafter>();
  if (kind == "ngram") {
    if (min_ngram < 1 || max_ngram < min_ngram)
      return invalid_argument("ngram speculation needs 1 <= ngram_min <= ngram_max, got ngram_min " +
                              std::to_string(min_ngram) + " and ngram_max " + std::to_string(max_ngram));
    return std::unique_ptr<Drafter>(std::make_unique<NgramDrafter>(min_ngram, max_ngram));
  }
  return invalid_argument("unknown speculation '" + std::string(kind) + "' (known: none, ngram)");
}

}  // namespace prism::engines::generate

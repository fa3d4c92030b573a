// Regex: a PCRE2 pattern compiled once (UTF + UCP, so \p{L}, \w and \s are Unicode classes as
// in the Rust regex crate Hugging Face uses), JIT-compiled where the platform allows. Shared
// read-only across threads; match data is per thread. Inputs must be valid UTF-8
// (the tokenizer repairs its input first), so matching skips PCRE2's UTF check.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::text {

struct Match {
  size_t begin = 0, end = 0;  // byte offsets, [begin, end)
};

class Regex {
 public:
  // invalid_argument naming the pattern and PCRE2's message when it does not compile.
  static Result<Regex> compile(const std::string& pattern);
  // A pattern matching `literal` exactly (regex metacharacters escaped).
  static Result<Regex> literal(const std::string& literal);

  // The first match starting at or after byte pos; false when there is none.
  bool find(std::string_view text, size_t pos, Match& match) const;
  // Every non-overlapping match, left to right (an empty match advances one character).
  void find_all(std::string_view text, std::vector<Match>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;  // immutable after compile
  std::string pattern_;
};

}  // namespace prism::text

// Added-token matching. NOTE: like HF's aho-corasick LeftmostLongest scan, a match that fails
// single_word is skipped whole (no shorter pattern is tried at the same position), and the
// scan resumes after it.
#include "text/added_tokens.h"

#include <algorithm>

#include "text/utf8.h"

namespace prism::text {
namespace {

bool is_word_char(char32_t c) { return c == '_' || is_alphanumeric(c); }

// The code point that ends at text[end) (end > 0).
char32_t code_point_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, start);
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  if (pattern.empty()) return;
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
  int32_t node = 0;
  for (unsigned char b : pattern) {
    auto& ch = nodes[node].children;
    auto it = std::find_if(ch.begin(), ch.end(), [&](const auto& c) { return c.first == b; });
    if (it != ch.end()) {
      node = it->second;
    } else {
      const int32_t next = static_cast<int32_t>(nodes.size());
      nodes[node].children.push_back({b, next});
      nodes.emplace_back();
      node = next;
    }
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // the first token with a pattern wins
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& ch = nodes[node].children;
    const unsigned char b = static_cast<unsigned char>(text[i]);
    auto it = std::find_if(ch.begin(), ch.end(), [&](const auto& c) { return c.first == b; });
    if (it == ch.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {i + 1 - pos, nodes[node].token};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_id_.emplace(t.id, i);
    by_content_.emplace(t.content, i);
    if (t.normalized && normalizer != nullptr) {
      std::string pattern = t.content;
      normalizer->normalize(pattern);
      normalized_.insert(pattern, static_cast<int32_t>(i));
    } else if (t.normalized) {
      normalized_.insert(t.content, static_cast<int32_t>(i));
    } else {
      raw_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized_pass, std::vector<Segment>& out) const {
  const Trie& trie = normalized_pass ? normalized_ : raw_;
  size_t emitted = 0;  // text before this is already in out
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [length, index] = trie.longest(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    size_t begin = pos, end = pos + length;
    if (t.single_word) {
      const bool left_ok = begin == 0 || !is_word_char(code_point_before(text, begin));
      size_t after = end;
      const bool right_ok = end == text.size() || !is_word_char(next_code_point(text, after));
      if (!left_ok || !right_ok) {
        pos = end;
        continue;
      }
    }
    if (t.lstrip) {
      while (begin > emitted && is_whitespace(code_point_before(text, begin))) {
        size_t s = begin - 1;
        while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        begin = s;
      }
    }
    if (t.rstrip) {
      while (end < text.size()) {
        size_t next = end;
        if (!is_whitespace(next_code_point(text, next))) break;
        end = next;
      }
    }
    if (begin > emitted) out.push_back({text.substr(emitted, begin - emitted), std::nullopt, emitted});
    out.push_back({text.substr(begin, end - begin), t.id, begin});
    emitted = pos = end;
  }
  if (text.size() > emitted) out.push_back({text.substr(emitted), std::nullopt, emitted});
}

const AddedToken* AddedVocabulary::find(TokenId id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<TokenId> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

}  // namespace prism::text

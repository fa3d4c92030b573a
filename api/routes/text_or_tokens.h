// api/routes/text_or_tokens.h: the four forms OpenAI accepts for a field of texts (embeddings'
// `input`, completions' `prompt`): a string, an array of strings, an array of token ids, or an
// array of token-id arrays. One parser, so every route checks and words them the same way.
// Vocabulary and length are the model frontend's business, later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace prism::api {

// A field's value in the form the client sent: texts, or token ids (never both).
struct TextOrTokens {
  std::string field;    // the field's name ("input", "prompt"), for element names
  bool tokens = false;  // true: token_ids holds the items; false: texts does
  bool scalar = false;  // one string or one token array, not an array of them
  std::vector<std::string> texts;
  std::vector<std::vector<int64_t>> token_ids;

  std::size_t size() const { return tokens ? token_ids.size() : texts.size(); }
  // `field` for a scalar, else "field[i]": how messages name an element.
  std::string name(std::size_t i) const;
};

// Reads `value`: its form (one of the four, never mixed), non-empty strings and arrays, JSON
// integers for token ids, at most max_items items (`items`: their plural noun in that
// message, e.g. "inputs"). invalid_argument whose message names the element
// ("prompt[1][3] is 1.5, not an integer token id.").
Result<TextOrTokens> parse_text_or_tokens(const nlohmann::json& value, std::string_view field, std::string_view items,
                                          std::size_t max_items);

}  // namespace prism::api

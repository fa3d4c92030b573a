// Encoding: what the tokenizer hands a model for one text (or one text pair): ids plus the
// per-token side arrays BERT-style encoders read. No character offsets: nothing in Prism
// maps tokens back to the input text yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "text/token_model.h"

namespace prism::text {

struct Encoding {
  std::vector<TokenId> ids;
  std::vector<int32_t> type_ids;             // segment of each token: 0 first text, 1 second
  std::vector<uint8_t> special_tokens_mask;  // 1: added by the post-processor or padding
  std::vector<uint8_t> attention_mask;       // 0: padding

  size_t size() const { return ids.size(); }
  void push_back(TokenId id, int32_t type_id, bool special) {
    ids.push_back(id);
    type_ids.push_back(type_id);
    special_tokens_mask.push_back(special ? 1 : 0);
    attention_mask.push_back(1);
  }
  void append(const Encoding& other) {
    ids.insert(ids.end(), other.ids.begin(), other.ids.end());
    type_ids.insert(type_ids.end(), other.type_ids.begin(), other.type_ids.end());
    special_tokens_mask.insert(special_tokens_mask.end(), other.special_tokens_mask.begin(),
                               other.special_tokens_mask.end());
    attention_mask.insert(attention_mask.end(), other.attention_mask.begin(), other.attention_mask.end());
  }
  void set_type_id(int32_t type_id) { type_ids.assign(ids.size(), type_id); }
};

}  // namespace prism::text

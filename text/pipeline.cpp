// The HF pipeline. NOTE: the order is HF's extract_and_normalize: raw added tokens are cut out
// of the input first; each stretch between them is normalised, then normalized=true added
// tokens are cut out of that, and only then are the rest pre-tokenized and modelled.
#include "text/pipeline.h"

#include <algorithm>

namespace prism::text {

Pipeline::Pipeline(PipelineParts parts)
    : parts_(std::move(parts)), added_(parts_.added_tokens, parts_.normalizer.get()) {}

void Pipeline::encode(std::string_view text, std::vector<TokenId>& ids) const {
  if (added_.empty()) {
    encode_segment(text, 0, ids);
    return;
  }
  thread_local std::vector<Segment> segments;
  segments.clear();
  added_.split(text, /*normalized_pass=*/false, segments);
  for (const Segment& s : segments) {  // encode_segment has buffers of its own
    if (s.token) {
      ids.push_back(*s.token);
    } else {
      encode_segment(s.text, s.offset, ids);
    }
  }
}

// NOTE: the normalised text and the segment list are per-thread buffers reused from call to
// call, and pieces are streamed from the pre-tokenizer into the model, so a document costs no
// allocation proportional to its number of pieces (a 1 MB document is ~250k of them).
void Pipeline::encode_segment(std::string_view text, size_t offset, std::vector<TokenId>& ids) const {
  thread_local std::string normalized;
  thread_local std::vector<Segment> segments;
  normalized.assign(text);
  if (parts_.normalizer) parts_.normalizer->normalize(normalized);
  segments.clear();
  added_.split(normalized, /*normalized_pass=*/true, segments);
  const TokenModel& model = *parts_.model;
  for (const Segment& s : segments) {
    if (s.token) {
      ids.push_back(*s.token);
    } else if (parts_.pre_tokenizer) {
      parts_.pre_tokenizer->split(s.text, offset + s.offset,
                                  [&](std::string_view piece, size_t) { model.tokenize(piece, ids); });
    } else if (!s.text.empty()) {
      model.tokenize(s.text, ids);
    }
  }
}

size_t Pipeline::num_special_tokens(bool pair) const {
  return parts_.post_processor ? parts_.post_processor->num_added_tokens(pair) : 0;
}

void Pipeline::post_process(std::vector<Encoding>& encodings, bool add_special_tokens) const {
  if (parts_.post_processor) {
    parts_.post_processor->process(encodings, add_special_tokens);
  } else if (encodings.size() == 2) {
    encodings[1].set_type_id(1);
  }
}

Result<std::string> Pipeline::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (TokenId id : ids) {
    if (const AddedToken* t = added_.find(id)) {
      if (!(skip_special_tokens && t->special)) tokens.push_back(t->content);
      continue;
    }
    const std::string_view token = parts_.model->id_to_token(id);
    if (token.empty()) return out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
    tokens.emplace_back(token);
  }
  if (!parts_.decoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) joined.push_back(' ');
      joined += tokens[i];
    }
    return joined;
  }
  parts_.decoder->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::optional<TokenId> Pipeline::token_to_id(std::string_view token) const {
  if (auto id = added_.token_to_id(token)) return id;
  return parts_.model->token_to_id(token);
}

std::string Pipeline::id_to_token(TokenId id) const {
  if (const AddedToken* t = added_.find(id)) return t->content;
  return std::string(parts_.model->id_to_token(id));
}

int32_t Pipeline::vocab_size() const {
  int32_t n = parts_.model->vocab_size();
  for (const AddedToken& t : added_.tokens()) n = std::max(n, t.id + 1);
  return n;
}

bool Pipeline::is_special(TokenId id) const {
  const AddedToken* t = added_.find(id);
  return t != nullptr && t->special;
}

}  // namespace prism::text

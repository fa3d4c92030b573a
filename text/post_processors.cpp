// Post-processor components. NOTE: a merging processor leaves exactly one encoding behind;
// the pipeline concatenates whatever is left (no processor: A then B with type id 1).
#include "text/post_processors.h"

#include "base/check.h"

namespace prism::text {

size_t TemplateProcessor::num_added_tokens(bool pair) const {
  size_t n = 0;
  for (const TemplatePiece& p : pair ? pair_ : single_) {
    if (p.is_sequence) continue;
    auto it = special_tokens_.find(p.name);
    if (it != special_tokens_.end()) n += it->second.size();
  }
  return n;
}

void TemplateProcessor::process(std::vector<Encoding>& encodings, bool add_special_tokens) const {
  PRISM_CHECK(encodings.size() == 1 || encodings.size() == 2);
  const bool pair = encodings.size() == 2;
  Encoding out;
  for (const TemplatePiece& p : pair ? pair_ : single_) {
    if (p.is_sequence) {
      const Encoding& src = encodings[p.name == "B" && pair ? 1 : 0];
      Encoding part = src;
      part.set_type_id(p.type_id);
      out.append(part);
    } else if (add_special_tokens) {
      for (TokenId id : special_tokens_.at(p.name)) out.push_back(id, p.type_id, true);
    }
  }
  encodings.assign(1, std::move(out));
}

void BertProcessor::process(std::vector<Encoding>& encodings, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  Encoding out;
  out.push_back(cls_, 0, true);
  out.append(encodings[0]);
  out.push_back(sep_, 0, true);
  if (encodings.size() == 2) {
    Encoding b = encodings[1];
    b.set_type_id(1);
    out.append(b);
    out.push_back(sep_, 1, true);
  }
  encodings.assign(1, std::move(out));
}

void RobertaProcessor::process(std::vector<Encoding>& encodings, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  Encoding out;
  out.push_back(cls_, 0, true);
  out.append(encodings[0]);
  out.push_back(sep_, 0, true);
  if (encodings.size() == 2) {
    out.push_back(sep_, 0, true);
    out.append(encodings[1]);
    out.push_back(sep_, 0, true);
  }
  out.set_type_id(0);
  encodings.assign(1, std::move(out));
}

size_t SequenceProcessor::num_added_tokens(bool pair) const {
  size_t n = 0;
  for (const auto& s : steps_) n += s->num_added_tokens(pair);
  return n;
}

void SequenceProcessor::process(std::vector<Encoding>& encodings, bool add_special_tokens) const {
  for (const auto& s : steps_) s->process(encodings, add_special_tokens);
}

}  // namespace prism::text

// engines/generate/text_output.cpp: a choice's tokens as text.
#include "engines/generate/text_output.h"

#include <algorithm>
#include <memory>
#include <span>

namespace prism::engines::generate {
namespace {

// Prompt tokens the detokenizer sees before the output (the first token's leading space).
constexpr size_t kDetokenizerPromptTail = 5;

}  // namespace

void TextOutput::start(Sequence& s) const {
  const frontends::GenerateInput& in = *s.request->input;
  const size_t tail = std::min(in.prompt.size(), kDetokenizerPromptTail);
  s.detokenizer = std::make_unique<IncrementalDetokenizer>(tokenizer_, std::span<const int32_t>(in.prompt).last(tail),
                                                           in.sampling.stop, /*skip_special_tokens=*/true,
                                                           in.sampling.min_tokens);
}

bool TextOutput::push(Sequence& s, int32_t token) const {
  const IncrementalDetokenizer::Step d = s.detokenizer->push(token);
  s.output.text += d.text;
  return d.stopped;
}

void TextOutput::flush(Sequence& s) const { s.output.text += s.detokenizer->finish(); }

}  // namespace prism::engines::generate

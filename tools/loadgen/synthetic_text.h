// tools/loadgen/synthetic_text.h: prompt and document text of a chosen length. Words come from a
// list of common English words, each a single token in the WordPiece, BPE and SentencePiece
// vocabularies of the usual models, so N words is about N tokens whichever model serves them;
// servers that report usage give the exact count. The text means nothing: speed does not
// depend on it.
#pragma once

#include <cstdint>
#include <string>

#include "tools/loadgen/rng.h"

namespace prism::tools::loadgen {

// `num_words` lower-case words separated by single spaces, no punctuation: as many tokens
// as words with those vocabularies (plus the specials a tokenizer adds).
std::string synthetic_text(Rng& rng, int64_t num_words);

}  // namespace prism::tools::loadgen

// tools/loadgen/synthetic_text.cpp: random common words.
#include "tools/loadgen/synthetic_text.h"

#include <array>
#include <string_view>

namespace prism::tools::loadgen {

namespace {

// Lower-case, short, frequent: a single token each in BERT's uncased WordPiece, GPT-2's BPE,
// Llama 2's SentencePiece and the demo set's small vocabulary (checked against the
// vocabularies in ../shared/testdata/tokenizers).
constexpr std::array<std::string_view, 128> kWords = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
    "who", "so", "no", "time", "people", "year", "way", "day", "man", "thing", "woman", "life", "child",
    "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part", "place",
    "case", "week", "company", "system", "program", "question", "work", "government", "number", "night",
    "point", "home", "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right",
    "study", "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
    "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "good",
    "name", "president", "team", "minute", "idea", "new", "body", "information", "back", "parent", "face",
    "first", "great"};

}  // namespace

std::string synthetic_text(Rng& rng, int64_t num_words) {
  std::string out;
  out.reserve(static_cast<size_t>(num_words) * 6);
  for (int64_t i = 0; i < num_words; ++i) {
    if (i > 0) out += ' ';
    out += kWords[rng.next_u64() % kWords.size()];
  }
  return out;
}

}  // namespace prism::tools::loadgen

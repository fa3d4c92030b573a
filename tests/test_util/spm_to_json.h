// Builds a Hugging Face tokenizer.json (Llama 2 layout: BPE with byte_fallback, Prepend +
// Replace normalizer or a Metaspace pre-tokenizer, ByteFallback/Fuse/Strip decoder) from a
// SentencePiece BPE .model, deriving merges as HF's SentencePieceExtractor does. Lets tests
// check the tokenizer.json pipeline against libsentencepiece on the same vocabulary; and trains
// small SentencePiece models for oracle tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace prism::test {

enum class SpmJsonLayout {
  prepend_replace,  // Llama 2 tokenizer.json: normalizer Prepend("▁") + Replace(" ", "▁")
  metaspace,        // newer files: pre_tokenizer Metaspace(prepend_scheme "first", split false)
};

// The vocabulary and merges HF's converter gives a SentencePiece BPE model.
// NOTE: every split of a piece (at character boundaries) into two vocabulary pieces is a
// merge; within a piece they sort by (left id, right id); then all sort stably by the merged
// piece's score, highest first. SentencePiece merges the pair whose concatenation scores
// highest, so these ranks reproduce its order.
struct SpmBpe {
  std::vector<std::pair<std::string, int>> vocab;              // piece, id
  std::vector<std::pair<std::string, std::string>> merges;     // by rank
  std::string unk_token;
};
Result<SpmBpe> spm_bpe_vocab_and_merges(const std::string& model_path);

Result<std::string> spm_to_tokenizer_json(const std::string& model_path, SpmJsonLayout layout);

// Trains a SentencePiece model in-process on `corpus` with trainer flags `args`
// ("--model_type=unigram --vocab_size=..."); returns the serialised ModelProto.
Result<std::string> train_sentencepiece(const std::vector<std::string>& corpus, const std::string& args);

}  // namespace prism::test

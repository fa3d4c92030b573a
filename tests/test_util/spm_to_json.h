// Builds a Hugging Face tokenizer.json (Llama 2 layout: BPE with byte_fallback, Prepend +
// Replace normalizer or a Metaspace pre-tokenizer, ByteFallback/Fuse/Strip decoder) from a
// SentencePiece BPE .model, deriving merges as HF's SentencePieceExtractor does. Lets tests
// check the tokenizer.json pipeline against libsentencepiece on the same vocabulary.
#pragma once

#include <string>

#include "base/status.h"

namespace prism::test {

enum class SpmJsonLayout {
  prepend_replace,  // Llama 2 tokenizer.json: normalizer Prepend("▁") + Replace(" ", "▁")
  metaspace,        // newer files: pre_tokenizer Metaspace(prepend_scheme "first", split false)
};

Result<std::string> spm_to_tokenizer_json(const std::string& model_path, SpmJsonLayout layout);

}  // namespace prism::test

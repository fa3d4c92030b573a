// Whisper-shaped tokenizer files for tests, built from the real GPT-2 tokenizer.json in
// testdata (real checkpoints cannot be downloaded here): Whisper's special tokens appended as
// added tokens with the real checkpoints' ids and order, optional timestamp tokens, and the
// tokenizer_config.json, generation_config.json and config.json keys Hugging Face writes for
// whisper. What the BPE makes of text is GPT-2's, which is what the English-only (.en)
// checkpoints use; the multilingual checkpoints' own BPE differs, but no Prism code depends on
// which text id is which. It must not know about models or weights.
//
// NOTE: the multilingual layout has 50257 ordinary BPE ids (0..50256) before <|endoftext|> at
// 50257. GPT-2's id 50256 is its <|endoftext|>; there it becomes the plain vocabulary entry
// "<|filler|>" (GPT-2's added <|endoftext|> at 50256 is dropped), a string the byte-level BPE
// never produces from text, so every special id is the real one and 50256 is an inert
// non-special id. The English-only layout keeps GPT-2's <|endoftext|> at 50256, as the real
// .en tokenizers do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace prism::test {

enum class WhisperLayout : uint8_t {
  multilingual,  // whisper-tiny .. large-v2 (vocab 51865), large-v3 with num_languages 100 (51866)
  english,       // tiny.en .. medium.en (vocab 51864)
};

struct WhisperFilesOptions {
  WhisperLayout layout = WhisperLayout::multilingual;
  int num_languages = 99;          // 100: large-v3's layout (adds <|yue|>; later ids move up one)
  bool timestamp_tokens = true;    // <|0.00|>..<|30.00|> as added tokens (newer files; older: none)
  bool nocaptions = false;         // older files name <|nospeech|> <|nocaptions|>
  bool generation_config = true;   // write generation_config.json
  bool merge_config = true;        // write config.json's whisper keys (existing keys win)
  int num_mel_bins = 80;
  int max_target_positions = 448;
};

// The ids written, for tests to check against.
struct WhisperTokenIds {
  int32_t eot = -1, sot = -1, first_language = -1, translate = -1, transcribe = -1, startoflm = -1,
          startofprev = -1, nospeech = -1, notimestamps = -1, timestamp_begin = -1;
  int32_t vocab_size = 0;                     // the model's (config.json vocab_size)
  int32_t space = -1;                         // " " (GPT-2's "Ġ", 220)
  std::vector<std::string> language_codes;    // in token order (en first)
  std::vector<int32_t> suppress_tokens;       // as written in generation_config.json
};

// whisper's LANGUAGES codes in token order (100: yue last).
const std::vector<std::string>& whisper_language_codes();

// Writes tokenizer.json, tokenizer_config.json, and (per options) generation_config.json and
// config.json into `dir` (created if missing). config.json: model_type, vocab_size,
// num_mel_bins, max_target_positions and the token ids are added where absent; other keys stay.
Result<WhisperTokenIds> write_whisper_files(const std::string& dir, const WhisperFilesOptions& options = {});

}  // namespace prism::test

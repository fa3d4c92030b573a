// frontends/speech_processor.h: what a Whisper deployment does around its decoder, as
// openai/whisper's decoding.py and transformers' WhisperForConditionalGeneration.generate do:
// the special tokens (<|startoftranscript|>, languages, <|transcribe|> / <|translate|>,
// <|notimestamps|>, <|startofprev|>, <|nospeech|>, timestamps <|0.00|> .. <|30.00|> every
// 0.02 s), the decoder prompt, the logit rules (suppress_tokens and begin_suppress_tokens from
// generation_config.json, Whisper's timestamp rules, language detection among the language
// tokens, the no-speech probability at the start-of-transcript position) and the parsing of a
// decoded token list into timed segments. Timestamp tokens are found by text ("<|0.00|>") in
// the tokenizer, else counted from <|notimestamps|> + 1 (older tokenizer.json files).
// Shared read-only by the api's threads and the engine; holds no tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "configs/whisper_config.h"
#include "frontends/logits_processor.h"
#include "text/tokenizer.h"

namespace prism::frontends {

enum class SpeechTask : uint8_t { transcribe, translate };

// One segment decode: the prompt and the rules.
struct SpeechDecodeOptions {
  SpeechTask task = SpeechTask::transcribe;
  std::optional<std::string> language;  // ISO code ("en", "fr", ...); none: detected
  bool timestamps = true;               // false: <|notimestamps|> and no timestamp tokens
  // Text tokens (no specials) conditioning the decode: <|startofprev|> + the last
  // (max_target_positions / 2 - 1) of them before <|startoftranscript|> (the OpenAI `prompt`,
  // or the previous chunk's text in sequential decoding).
  std::vector<int32_t> previous;
  // Timestamps may not exceed this in the segment (seconds of real audio in it), nor the
  // first timestamp max_initial_timestamp (1.0 s, generation_config's index 50).
  double segment_seconds = 30.0;
};

// What the rules saw while decoding one choice; written on the engine thread, read by the
// caller after the request completed.
struct SpeechObservation {
  float no_speech_prob = 0.0f;  // softmax at the <|startoftranscript|> position, <|nospeech|>
  std::string language;         // the language token picked (given or detected), e.g. "en"
  float language_prob = 0.0f;   // its probability among the language tokens when detected
};

// A decoded segment of a chunk, times relative to the chunk's start.
struct TimedText {
  double start = 0, end = 0;
  std::string text;
  std::vector<int32_t> tokens;  // text tokens with their timestamp tokens
};

class SpeechProcessor {
 public:
  // model_dir: config.json, read through configs::WhisperConfig (num_mel_bins,
  // max_target_positions, vocab_size, and decoder_start_token_id, eos_token_id and the
  // suppress lists of older checkpoints), generation_config.json (suppress_tokens,
  // begin_suppress_tokens, lang_to_id, task_to_id, no_timestamps_token_id,
  // max_initial_timestamp_index, is_multilingual) when present, the tokenizer's added tokens.
  // invalid_argument naming what is missing (an English-only model has no language tokens:
  // only "en" is accepted); the config's own errors as WhisperConfig::from_hf's.
  static Result<std::unique_ptr<const SpeechProcessor>> load(const std::string& model_dir,
                                                             const text::Tokenizer& tokenizer);
  // The same with config.json already read (GenerateFrontend parses it once).
  static Result<std::unique_ptr<const SpeechProcessor>> load(const std::string& model_dir,
                                                             const configs::WhisperConfig& config,
                                                             const text::Tokenizer& tokenizer);

  int num_mel_bins() const { return num_mel_bins_; }
  int max_target_positions() const { return max_target_positions_; }
  bool multilingual() const { return multilingual_; }
  // invalid_argument naming the code when the model has no such language ("xx" or, for an
  // English-only model, anything but "en"). Accepts codes ("en"), whisper's names and aliases
  // ("english", "castilian"), any case, and a region suffix ("en-US"); returns the code.
  Result<std::string> check_language(std::string_view language) const;
  // openai/whisper's name of a language code ("en" → "english"); the code itself when unknown.
  static std::string language_name(std::string_view code);
  // The model's language tokens (code, id) in id order; empty for an English-only model.
  const std::vector<std::pair<std::string, int32_t>>& languages() const { return languages_; }

  // [<|startofprev|> previous...] <|startoftranscript|> [<|lang|> <|task|> [<|notimestamps|>]]
  // — the language and task only when the language is known (else detected at the first
  // step and the task forced at the second, by the rules). An English-only model's prompt has
  // neither (<|startoftranscript|> [<|notimestamps|>]); its task is always transcribe.
  // `previous` keeps text and timestamp tokens (other specials are dropped). A language that
  // check_language() does not accept is detected.
  std::vector<int32_t> prompt(const SpeechDecodeOptions& options) const;
  // Tokens the generated part may hold at most: max_target_positions / 2 (224 for real models).
  int max_new_tokens() const { return max_target_positions_ / 2; }
  // The same, capped so that prompt + generated fit max_target_positions (openai/whisper stops
  // there): a full previous text (<|startofprev|> + 223) before a 4-token SOT sequence leaves 220.
  int max_new_tokens(size_t prompt_length) const;

  // The per-choice rules for a decode with this prompt; each processor writes its choice's
  // observation into observations[choice] (the vector must have n entries and outlive the
  // request; null: nothing is recorded). In openai/whisper's order: with the language
  // unknown, the first step allows only the argmax language token (the detection), then the
  // task and (without timestamps) <|notimestamps|> are forced; at the first text position
  // begin_suppress_tokens; everywhere suppress_tokens + <|startoftranscript|>,
  // <|startofprev|>, <|startoflm|>, the task tokens, <|nospeech|>, the language tokens; then
  // the timestamp rules (pairs, no decrease, max_initial_timestamp, the timestamp mass against
  // the best text token, none beyond segment_seconds), or, without timestamps, no timestamp
  // token. The language tokens, the timestamps without timestamps and segment_seconds are
  // Prism's additions to openai's filters. probe_position() is <|startoftranscript|>'s.
  LogitsProcessorFactory rules(const SpeechDecodeOptions& options,
                               std::shared_ptr<std::vector<SpeechObservation>> observations) const;

  // A decoded choice (generated tokens, end-of-text excluded) → its segments: consecutive
  // timestamp pairs delimit segments; a trailing text without a closing timestamp ends at
  // segment_seconds; without timestamps the whole text is one segment [0, segment_seconds).
  // Language/task tokens forced at the start are skipped.
  std::vector<TimedText> segments(std::span<const int32_t> generated, double segment_seconds) const;
  // Text tokens only (timestamps and specials dropped), decoded.
  std::string text(std::span<const int32_t> generated) const;
  // Text → tokens without specials (the OpenAI `prompt` field), as transformers'
  // get_prompt_ids and openai/whisper encode it: " " + the trimmed text.
  std::vector<int32_t> encode_text(std::string_view text) const;

  // The speech deployment's orchestration knobs (pipelines/transcribe reads them: vad*, asr_*,
  // max_audio_seconds, live_*): the generate engine accepts these names in a transcribe
  // deployment beside its own.
  static std::span<const std::string_view> knob_names();

  int32_t eot() const { return eot_; }
  int32_t sot() const { return sot_; }
  int32_t no_timestamps() const { return no_timestamps_; }
  int32_t timestamp_begin() const { return timestamp_begin_; }
  int32_t no_speech() const { return no_speech_; }
  std::optional<int32_t> language_token(std::string_view code) const;

 private:
  SpeechProcessor() = default;
  const text::Tokenizer* tokenizer_ = nullptr;  // the frontend's; outlives this
  int num_mel_bins_ = 80;
  int max_target_positions_ = 448;
  bool multilingual_ = true;
  int32_t eot_ = -1, sot_ = -1, sot_prev_ = -1, sot_lm_ = -1, transcribe_ = -1, translate_ = -1;
  int32_t no_timestamps_ = -1, no_speech_ = -1, timestamp_begin_ = -1;
  int max_initial_timestamp_index_ = 50;  // -1: none (generation_config's null)
  std::vector<std::pair<std::string, int32_t>> languages_;  // code → token, in token order
  // Language tokens an English-only model still has in its vocabulary (suppressed in text).
  std::vector<int32_t> language_tokens_;
  std::vector<int32_t> suppress_tokens_, begin_suppress_tokens_;
};

}  // namespace prism::frontends

// frontends/generate_frontend.h: what the api needs of a generate deployment before it
// queues a request, shared read-only by the I/O threads and every replica: the tokenizer, the
// chat template, the context length, the end-of-sequence tokens and the model's sampling
// defaults (generation_config.json); for a VLM its vision processor, for a speech model (Whisper)
// its speech processor. Reads only small files: no weights.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "frontends/sampling_params.h"
#include "frontends/speech_processor.h"
#include "frontends/vision_processor.h"
#include "serving/config.h"
#include "serving/engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace prism::frontends {

class GenerateFrontend final : public serving::Frontend {
 public:
  // Reads <model>/tokenizer files, tokenizer_config.json (chat template, bos/eos),
  // config.json (max_position_embeddings, sliding_window, eos_token_id: int or list; a VLM's
  // under text_config) and generation_config.json when present (eos_token_id, temperature,
  // top_p, top_k, min_p, repetition_penalty). Knob `max_model_len` lowers the context length.
  // A VLM (model_type "llava" / "idefics3") also loads its VisionProcessor (its knobs:
  // VisionProcessor::knob_names()) and prefers the processor's chat template
  // (chat_template.jinja / chat_template.json) to the tokenizer's. A Whisper model (model_type
  // "whisper") loads its SpeechProcessor instead of a chat template; its context length is
  // config.json's max_target_positions (transformers' default 448 when absent).
  static Result<std::shared_ptr<const GenerateFrontend>> load(const serving::DeploymentConfig& config);

  const text::Tokenizer& tokenizer() const { return tokenizer_; }
  // Null when the model has no chat template (then only /v1/completions serves it).
  const text::ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  int64_t max_context() const { return max_context_; }  // prompt + output tokens
  int64_t vocab_size() const { return vocab_size_; }    // config.json's (the logits' width)
  const std::vector<int32_t>& eos_token_ids() const { return eos_ids_; }
  // The model's defaults for the fields a request leaves unset (temperature, top_p, top_k,
  // min_p, repetition_penalty); other fields at SamplingParams' defaults.
  const SamplingParams& default_sampling() const { return defaults_; }

  // The prompt of a chat: the template rendered with add_generation_prompt, then tokenized
  // without adding special tokens (the template writes them). failed_precondition when the
  // model has no chat template; the template's invalid_argument as is.
  Result<std::vector<int32_t>> chat_prompt(const text::ChatRequest& chat) const;
  // A VLM's chat prompt: the template rendered (content parts with {"type": "image"} for
  // each item, in order), each placeholder expanded to its item's prompt_text, tokenized; the
  // image-token positions must number the items' rows (invalid_argument otherwise: a text part
  // holding the placeholder). A text-only model: failed_precondition when `media` is not
  // empty, else chat_prompt(chat).
  Result<std::vector<int32_t>> chat_prompt(const text::ChatRequest& chat, std::span<const PreparedMedia> media) const;
  // A completion prompt: text tokenized with the tokenizer's special tokens (BOS).
  std::vector<int32_t> text_prompt(const std::string& text) const;
  // Token ids given by the client: out_of_range naming the first id outside the vocabulary.
  Result<std::vector<int32_t>> check_ids(const std::vector<int64_t>& ids) const;
  // invalid_argument with the numbers when prompt + max_tokens cannot fit ("This model's
  // maximum context length is 2048 tokens. However, you requested 2100 tokens (2000 in the
  // messages, 100 in the completion)."). max_tokens: none → resolved to the room left.
  Result<int> resolve_max_tokens(int64_t prompt_tokens, std::optional<int64_t> max_tokens) const;

  // A token's text for logprobs: its decoded string and its bytes.
  std::string token_text(int32_t token) const;

  // The image and video side of a vision-language model (models/vlm/vision_language.h
  // families); null for a text-only LLM. Its image_token_id() marks the prompt positions the
  // engine fills with the media's rows.
  const VisionProcessor* vision() const { return vision_.get(); }
  // The speech side of an encoder-decoder speech model (Whisper: its tokens, prompts, logit
  // rules and segment parsing); null for other models. The engine then encodes each
  // request's GenerateInput::audio.
  const SpeechProcessor* speech() const { return speech_.get(); }

 private:
  text::Tokenizer tokenizer_;
  std::optional<text::ChatTemplate> chat_template_;
  int64_t max_context_ = 0;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> eos_ids_;
  SamplingParams defaults_;
  std::unique_ptr<const VisionProcessor> vision_;
  std::unique_ptr<const SpeechProcessor> speech_;  // reads tokenizer_ (declared before it)
};

}  // namespace prism::frontends

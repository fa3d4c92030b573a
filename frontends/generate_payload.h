// frontends/generate_payload.h: what a generate deployment passes between the api and
// its engine. Plain data: no tensors. A request is one prompt and n choices; the engine
// streams GenerateChunk partials (when the request has on_partial) and completes with a
// GenerateOutput holding every choice in full.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "frontends/logits_processor.h"
#include "frontends/sampling_params.h"
#include "media/image_preprocess.h"
#include "media/media_key.h"
#include "serving/request.h"

namespace prism::frontends {

// One image or video of a multimodal prompt. Its rows fill prompt positions that hold the
// frontend's image token id: the k-th such position of the prompt takes the k-th row of the
// items' rows, items in prompt order (what HF's masked_scatter does).
struct MediaItem {
  enum class Kind : uint8_t { image, video };
  Kind kind = Kind::image;
  // Content key of the encoder's input (decoded pixels + preprocessing + the knobs that act
  // before the encoder): the media cache's key for the encoder output.
  media::MediaKey key;
  // The encoder's input (image: tiles + global view; video: one view per sampled frame).
  // Immutable and shared: many requests may hold the same views.
  std::shared_ptr<const media::PixelViews> views;
  int spatial_pool = 1;   // p: each view's grid_side × grid_side rows averaged over p × p cells
  int temporal_pool = 1;  // t: rows of t consecutive views averaged (the last group may be short)
  int64_t num_rows = 0;   // rows it contributes: ceil(views / t) × (grid_side / p)²
};

// One audio segment of an encoder-decoder speech model (Whisper): its log-mel features,
// which the engine encodes once (SpeechEncoder) when the request is admitted. Shared and
// immutable: a re-run of the same chunk at another temperature passes the same features.
// NOTE: frames may be fewer than the encoder's 3000 (an even count): live partials encode
// only their window (whisper.cpp's audio_ctx), and the memory has frames / 2 positions.
struct AudioSegment {
  std::shared_ptr<const std::vector<float>> features;  // [num_mel_bins, frames] f32
  int64_t frames = 3000;
};

struct GenerateInput final : serving::Payload {
  std::vector<int32_t> prompt;  // token ids, special tokens included; checked by GenerateFrontend
  SamplingParams sampling;
  std::vector<MediaItem> media;  // VLM prompts: in prompt order; rows = the image-token positions
  // Speech prompts: every choice cross-attends this segment. Its K/V never enter (nor come
  // from) the prefix cache: the same prompt ids over other audio are another context.
  std::optional<AudioSegment> audio;
  // Optional per-choice logit rules (logits_processor.h); empty for plain LLM requests.
  LogitsProcessorFactory logits_processor;
};

// Why a choice ended. OpenAI's finish_reason strings: "stop" (an end-of-sequence token, a
// stop token or a stop string), "length" (max_tokens or the context length).
enum class FinishReason : uint8_t { stop, length };
std::string_view finish_reason_name(FinishReason reason);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // log-softmax of the model's logits (before penalties and temperature)
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // SamplingParams::top_logprobs entries, most likely first
};

// New output of one choice: in a GenerateChunk, what was produced since the previous chunk;
// in a GenerateOutput, the whole choice.
struct ChoiceDelta {
  int index = 0;                       // 0 .. n - 1
  std::string text;                    // detokenized; ends before a stop string; whole UTF-8 only
  std::vector<int32_t> tokens;         // the tokens behind `text` (stop tokens excluded)
  std::vector<TokenLogprobs> logprobs; // one per token, when SamplingParams::logprobs
  std::optional<FinishReason> finish;  // set on the choice's last delta
};

struct GenerateChunk final : serving::Payload {
  std::vector<ChoiceDelta> deltas;  // choices with something new this step
};

struct GenerateOutput final : serving::Payload {
  std::vector<ChoiceDelta> choices;  // all n, in index order, each with finish set
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;     // over every choice
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  int64_t encoded_media = 0;         // media items the encoder ran for (the rest: media-cache hits)
};

}  // namespace prism::frontends

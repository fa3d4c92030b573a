// configs/whisper_config.h: the config.json of a Whisper checkpoint (model_type "whisper"),
// typed and validated: the sizes models/whisper/ builds the encoder and decoder with, and the
// token ids and suppress lists older checkpoints keep in config.json (newer ones in
// generation_config.json, which the speech frontend reads). No weights, no tokens' texts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "configs/activation.h"
#include "configs/hf_config.h"

namespace prism::configs {

// config.json of model_type "whisper": d_model, encoder_layers, decoder_layers,
// encoder_attention_heads, decoder_attention_heads, encoder_ffn_dim, decoder_ffn_dim,
// num_mel_bins, max_source_positions (1500), max_target_positions (448), vocab_size,
// activation_function ("gelu"), scale_embedding (false); transformers' defaults for omitted
// keys (whisper-tiny's sizes). scale_embedding is read but, as in transformers, never
// applied: WhisperDecoder computes embed_scale and does not use it.
struct WhisperConfig {
  int64_t d_model = 384;
  int64_t encoder_layers = 4, decoder_layers = 4;
  int64_t encoder_heads = 6, decoder_heads = 6;
  int64_t encoder_ffn_dim = 1536, decoder_ffn_dim = 1536;
  int64_t num_mel_bins = 80;
  int64_t max_source_positions = 1500;
  int64_t max_target_positions = 448;
  int64_t vocab_size = 51865;
  bool scale_embedding = false;
  // "gelu" (erf, every released checkpoint), "gelu_new" / "gelu_pytorch_tanh", "relu": the
  // MLPs' activation. The convolutions' GELU is always erf, whatever this says.
  Activation activation = Activation::gelu_erf;

  // Token ids and lists as config.json gives them (none when absent or null); the speech
  // frontend checks them against the tokenizer and generation_config.json.
  std::optional<int64_t> eos_token_id, decoder_start_token_id;
  std::optional<std::vector<int64_t>> suppress_tokens, begin_suppress_tokens;

  // origin names the file in messages. unimplemented for another model_type or
  // architecture; invalid_argument naming a key of the wrong type or value.
  static Result<WhisperConfig> from_hf(const HfConfig& hf, const std::string& origin = "config.json");
  // dir/config.json, or a .json path.
  static Result<WhisperConfig> load(const std::string& dir_or_file);
  // Sizes positive, d_model divisible by both head counts.
  Status validate(const std::string& origin = "config.json") const;

  int64_t encoder_head_dim() const { return d_model / encoder_heads; }
  int64_t decoder_head_dim() const { return d_model / decoder_heads; }
};

bool is_whisper_model(const std::string& dir);  // config.json's model_type is "whisper"

}  // namespace prism::configs

// models/whisper/whisper.h: OpenAI's Whisper in transformers' WhisperForConditionalGeneration
// layout (model.encoder.*, model.decoder.*, proj_out tied to model.decoder.embed_tokens).
// Encoder: conv1 (k3, s1) + GELU, conv2 (k3, s2) + GELU, + embed_positions (the sinusoidal
// table stored in the checkpoint), pre-LN transformer layers, layer_norm. Decoder: token +
// learned positions, pre-LN layers of causal self-attention (its K/V in the engine's paged
// cache), cross-attention over the segment's CrossKv, GELU MLP; layer_norm; logits = x ·
// embed_tokensᵀ. k_proj has no bias (q, v, out do), as in the checkpoints.
// The two halves load separately so the generate engine drives them through its two
// interfaces: the Decoder (self-attention, cross-attention queries and outputs, MLP, LM
// head) and the SpeechEncoder (encoder + every decoder layer's encoder_attn.k_proj/v_proj).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "formats/hf_config.h"
#include "models/decoder.h"
#include "models/speech_encoder.h"
#include "runtime/ops.h"

namespace prism::models {

// config.json of model_type "whisper": d_model, encoder_layers, decoder_layers,
// encoder_attention_heads, decoder_attention_heads, encoder_ffn_dim, decoder_ffn_dim,
// num_mel_bins, max_source_positions (1500), max_target_positions (448), vocab_size,
// activation_function ("gelu"), scale_embedding (false); transformers' defaults for omitted keys.
struct WhisperConfig {
  int64_t d_model = 0;
  int64_t encoder_layers = 0, decoder_layers = 0;
  int64_t encoder_heads = 0, decoder_heads = 0;
  int64_t encoder_ffn_dim = 0, decoder_ffn_dim = 0;
  int64_t num_mel_bins = 80;
  int64_t max_source_positions = 1500;
  int64_t max_target_positions = 448;
  int64_t vocab_size = 0;
  bool scale_embedding = false;
  static Result<WhisperConfig> from_hf(const formats::HfConfig& hf);
};

bool is_whisper_model(const std::string& dir);  // config.json's model_type is "whisper"
Result<WhisperConfig> read_whisper_config(const std::string& dir);

// The decoder half: Decoder::forward needs batch.cross (one CrossKv per sequence). Its
// KvSpec is the self-attention's (decoder_layers, decoder_heads, d_model / heads).
// max_context() = max_target_positions.
Result<std::unique_ptr<Decoder>> load_whisper_decoder(const std::string& dir, ops::Precision precision);
// The encoder half (and the decoder's cross-attention K/V projections).
Result<std::unique_ptr<SpeechEncoder>> load_whisper_encoder(const std::string& dir, ops::Precision precision);

}  // namespace prism::models

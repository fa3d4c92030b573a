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
// The config is configs/whisper_config.h. Tokens, prompts and logit rules are not the model's
// (frontends/speech_processor.h).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "configs/whisper_config.h"
#include "models/decoder.h"
#include "models/speech_encoder.h"
#include "runtime/ops.h"

namespace prism::models {

// The decoder half: Decoder::forward needs batch.cross (one CrossKv per sequence, its
// frames any count up to max_source_positions). Its KvSpec is the self-attention's
// (decoder_layers, decoder_heads, d_model / heads). max_context() = max_target_positions.
// flops() counts cross-attention over max_source_positions frames (a 30-s segment).
// precision applies to the linears (self-attention q/k/v and out, cross-attention q and
// out, fc1, fc2, the LM head); the embedding tables keep the checkpoint's dtype, norms f32.
// Errors: the config's, a missing tensor (not_found naming it) or a misshapen one
// (invalid_argument naming it and both shapes), each prefixed with dir.
Result<std::unique_ptr<Decoder>> load_whisper_decoder(const std::string& dir, ops::Precision precision);

// The encoder half (and the decoder's cross-attention K/V projections). precision applies
// to the linears; the two convolutions run in f32. Errors as load_whisper_decoder's.
// What load_whisper_encoder returns is a WhisperEncoder.
Result<std::unique_ptr<SpeechEncoder>> load_whisper_encoder(const std::string& dir, ops::Precision precision);

class WhisperEncoder : public SpeechEncoder {
 public:
  // The encoder's output before the cross-attention projections (after layer_norm):
  // features [B, num_mel_bins, F] → [B, F / 2, d_model] f32, on the heap. For parity tests
  // and tools; encode() is what serving calls.
  virtual Tensor encoder_output(const Tensor& features) const = 0;
};

}  // namespace prism::models

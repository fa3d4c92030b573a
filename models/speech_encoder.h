// models/speech_encoder.h: the audio half of an encoder-decoder speech model (Whisper), behind
// one interface: log-mel features of 30-s segments in, each segment's cross-attention memory
// out — the encoder's output already projected to every decoder layer's cross-attention K and
// V, so a decode step only reads it. The engine computes it once per segment (when the
// segment's request is admitted, batched over the requests admitted together) and hands it
// to the Decoder with every step of that segment's sequences (DecoderBatch::cross).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace prism::models {

// One segment's cross-attention keys and values: per decoder layer, [frames, num_heads,
// head_dim] f32 (frames = 1500 for 30 s of Whisper audio). Immutable once built.
struct CrossKv {
  std::vector<Tensor> k, v;  // [num_decoder_layers]
  int64_t frames = 0;
  int64_t bytes() const;
};

class SpeechEncoder {
 public:
  virtual ~SpeechEncoder() = default;
  // features: [B, num_mel_bins(), F] f32 (media::LogMel values, segments back to back) → one
  // CrossKv of F / 2 frames per segment. F is input_frames() (30 s) or any smaller even count
  // (whisper.cpp's reduced audio_ctx: the positional table's first F / 2 rows); segments are
  // independent (batching changes nothing). F odd or > input_frames() is a checked error.
  virtual std::vector<std::shared_ptr<const CrossKv>> encode(const Tensor& features) const = 0;
  virtual int64_t num_mel_bins() const = 0;   // 80 (128 for large-v3)
  virtual int64_t input_frames() const = 0;   // 3000: 2 × max_source_positions
  virtual int64_t output_frames() const = 0;  // 1500: max_source_positions
  // Multiply-adds × 2 of encoding one segment (encoder and the cross K/V projections).
  virtual double flops_per_segment() const = 0;
};

}  // namespace prism::models

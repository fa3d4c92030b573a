// models/encoder.h: the encode pattern's model interface (ARCHITECTURE.md "Encoder::encode"):
// one parallel forward pass over every token of a batch of sequences. Text embedders (BERT
// family) implement it today; vision and audio encoders will too. An encoder only computes:
// batching, pooling policy and queues belong to engines/encode.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor.h"

namespace prism::models {

// A batch of sequences, flat: every tensor's first dim is tokens of all sequences back to
// back, delimited by cu_seqlens (the layout of ops::attention).
struct EncoderBatch {
  Tensor token_ids;   // [T] i32
  Tensor cu_seqlens;  // [S + 1] i32, starting at 0
  // Optional padding mask ([S] i32): when set, slot s of cu_seqlens holds kv_lens[s] real
  // tokens followed by padding, which no real token attends to (the padded layout, kept to
  // measure it against packing). Undefined: every token is real (packed, no padding).
  Tensor kv_lens;
};

class Encoder {
 public:
  virtual ~Encoder() = default;
  // Last hidden states, [T, hidden_size()] f32, one row per token of the batch (padding rows
  // included, with unspecified values). Positions restart at each sequence's first token.
  virtual Tensor encode(const EncoderBatch& batch) const = 0;
  virtual int64_t hidden_size() const = 0;
  // The longest sequence the model takes, special tokens included.
  virtual int64_t max_tokens() const = 0;
  // Multiply-adds × 2 for one sequence of `length` tokens: the useful-FLOP count benchmarks
  // divide by time (padding excluded).
  virtual double flops(int64_t length) const = 0;
};

}  // namespace prism::models

// models/decoder.h: the generate pattern's model interface (ARCHITECTURE.md
// "Decoder::forward"): one forward pass over a flat batch of sequences — prompt chunks being
// prefilled and single tokens (or a token plus draft tokens) being decoded, side by side —
// against a paged KV cache the engine owns. The LLM families implement it today; the LM of a
// VLM, the Whisper decoder and the TTS audio-token model will too, which is why an input row
// may be a precomputed embedding instead of a token id. A decoder only computes: scheduling,
// block allocation and sampling belong to engines/generate.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/speech_encoder.h"
#include "runtime/tensor.h"

namespace prism::models {

// The KV cache geometry a decoder needs; the engine allocates that many layers of blocks.
struct KvSpec {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// One layer's paged cache (see ops::PagedKv): k, v [num_blocks, block_size, Hkv, D] f32, bf16
// or i8; k_scale, v_scale [num_blocks, Hkv] f32 for i8 caches, undefined otherwise.
struct KvLayer {
  Tensor k, v;
  Tensor k_scale, v_scale;
};

// A step's batch, flat: the first dim of every per-token tensor is the tokens of all
// sequences back to back, delimited by cu_seqlens_q. Sequence s's query tokens are the last
// q_len of its context_lens[s] cached tokens (their K/V are written this step at
// slot_mapping), so the same batch shape covers prefill, chunked prefill, decode and the
// verification of draft tokens.
struct DecoderBatch {
  Tensor token_ids;         // [T] i32; -1 where input_embeddings supplies the row
  Tensor input_embeddings;  // optional [T, hidden_size] f32: rows used where token_ids is -1
  Tensor positions;         // [T] i32: rotary positions
  Tensor cu_seqlens_q;      // [S + 1] i32, starting at 0
  Tensor slot_mapping;      // [T] i32: block * block_size + offset of each token's K/V
  Tensor block_tables;      // [S, max_blocks] i32 (unused entries: any value)
  Tensor context_lens;      // [S] i32: tokens in the cache after this step's are written
  Tensor logits_rows;       // [N] i32: rows of T whose next-token logits are wanted, ascending
  // Encoder-decoder models (Whisper): sequence s cross-attends cross[s] (its segment's
  // memory, models/speech_encoder.h). Empty for decoder-only models.
  std::vector<const CrossKv*> cross;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Writes this step's K/V into `kv` (one entry per layer) and returns the logits of the
  // rows named by batch.logits_rows: [N, vocab_size()] f32.
  virtual Tensor forward(const DecoderBatch& batch, std::span<const KvLayer> kv) = 0;
  // Token embeddings ([T] i32 ids → [T, hidden_size] f32), for callers that splice other
  // modalities' features between text tokens.
  virtual Tensor embed(const Tensor& token_ids) const = 0;

  virtual KvSpec kv_spec() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t hidden_size() const = 0;
  // The longest context the model attends correctly: max_position_embeddings, capped by a
  // sliding window when the config has one (Prism does not run windowed attention).
  virtual int64_t max_context() const = 0;
  // Bytes of weights one decode step reads (every layer and the LM head, as packed): the
  // numerator of the bandwidth roofline.
  virtual int64_t weight_bytes() const = 0;
  // Bytes of weights the model keeps in memory: weight_bytes() plus what a step does not
  // stream (the embedding table, which a tied LM head keeps beside its packed copy; norms).
  virtual int64_t resident_weight_bytes() const { return weight_bytes(); }
  // Multiply-adds × 2 of a forward over `tokens` new tokens attending `context` cached ones
  // (LM head for one row per sequence not included): what prefill benchmarks divide by time.
  virtual double flops(int64_t tokens, int64_t context) const = 0;
};

}  // namespace prism::models

// engines/generate/sequence.h: the engine's state of one choice of one request, and of the
// request. Plain data the engine thread mutates between steps; no logic beyond accessors.
// NOTE: tokens = prompt + accepted output. K/V is cached for tokens[0, num_computed); while
// decoding num_computed == tokens.size() - 1 (the last sampled token is computed next step,
// with its drafts). blocks[i] holds positions [i·block_size, (i+1)·block_size); the table may
// run past what num_computed needs (blocks kept after rejected drafts). The first
// num_published blocks are full, final and published in the prefix cache (or hits from it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engines/generate/detokenizer.h"
#include "engines/generate/kv_block_pool.h"
#include "engines/generate/media_rows.h"
#include "engines/generate/sampler.h"
#include "frontends/generate_payload.h"
#include "frontends/logits_processor.h"
#include "models/speech_encoder.h"
#include "serving/request.h"

namespace prism::engines::generate {

struct RequestState;

struct Sequence {
  int64_t id = 0;             // engine-wide, increasing: admission order among equals
  RequestState* request = nullptr;  // not owned
  int choice = 0;

  std::vector<int32_t> tokens;
  int64_t num_computed = 0;
  std::vector<int> blocks;
  int num_published = 0;
  uint64_t last_hash = kRootBlockHash;  // hash of block num_published - 1
  std::vector<uint64_t> lookup_hashes;  // while waiting: hashes of the full blocks to look up
  std::vector<int32_t> draft;           // this step's draft tokens

  std::unique_ptr<SequenceSampler> sampler;
  std::unique_ptr<frontends::LogitsProcessor> processor;  // GenerateInput::logits_processor's for this choice, or null
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  frontends::ChoiceDelta output;          // the whole choice so far
  size_t streamed_text = 0;    // bytes of output.text already streamed
  size_t streamed_tokens = 0;  // entries of output.tokens (and logprobs) already streamed
  int64_t num_generated = 0;   // sampled tokens, stop tokens included
  bool finished = false;
  bool finish_streamed = false;  // the delta carrying finish went out
  serving::Clock::time_point last_token_time{};

  int64_t num_uncomputed() const { return int64_t(tokens.size()) - num_computed; }
  bool decoding() const { return num_generated > 0 && num_uncomputed() == 1; }
};

struct RequestState {
  serving::RequestPtr request;
  const frontends::GenerateInput* input = nullptr;  // owned by request
  std::vector<std::unique_ptr<Sequence>> choices;  // choice 0 first; the others forked after prefill
  int pending_forks = 0;                 // choices still to fork from choice 0
  int num_finished = 0;
  int64_t cached_prompt_tokens = 0;
  // Multimodal prompts: where the media rows go and their prefix-cache seeds (empty for text).
  // NOTE: media_rows holds the rows of the items flagged in media_held, only while a running
  // choice still has visual positions to prefill; a recomputation after preemption takes
  // them again (media cache, else the encoder).
  PromptMedia media;
  std::vector<float> media_rows;  // [media.num_rows(), hidden] f32, or empty
  std::vector<char> media_held;   // per item
  int64_t encoded_media = 0;      // items the encoder ran for on behalf of this request
  // Speech prompts: the audio segment's cross-attention memory, encoded when the request is
  // first admitted. NOTE: held until the request ends (a preempted choice is recomputed
  // against it, never re-encoded); every choice's sequences pass it to the decoder.
  std::shared_ptr<const models::CrossKv> cross;
  int64_t probe_position = -1;    // choice 0's processor's probe row (a prompt position), or -1
  bool scheduled = false;         // first scheduled (queue time observed)
  bool first_token = false;       // first token produced (TTFT observed)
};

}  // namespace prism::engines::generate

// engines/generate/generate_engine.h: the autoregressive engine (tasks "chat" and
// "transcribe"). One engine per replica runs the continuous-batching loop: admit waiting
// requests between steps, schedule
// a step under the token budget (decodes first, then chunks of prefills), run the decoder
// once over the flat batch, sample, stream, retire finished sequences, preempt (by
// recompute) when the KV cache is full. For a VLM, prompts carry media items whose encoder
// rows (from the media cache, else encoded in batches) fill the image-token positions, and
// the prefix cache keys those blocks by their media. For an encoder-decoder speech model
// (Whisper), each request carries an audio segment whose cross-attention memory is encoded
// once when it is admitted (batched over the requests admitted together) and per-choice logit
// rules; those requests bypass the prefix cache. Knobs: docs/configuration.md "chat",
// "transcribe".
#pragma once

#include "serving/engine.h"

namespace prism::engines::generate {

// Registers task "chat": GenerateFrontend + GenerateEngine over models/llama, or over a
// vision-language model's language model and media encoder (models/vlm); and task
// "transcribe": the same over Whisper's decoder and speech encoder (models/whisper).
void register_generate_engine(serving::EngineFactories& factories);

}  // namespace prism::engines::generate

// engines/generate/generate_engine.h: the autoregressive engine (task "chat"). One engine per
// replica runs the continuous-batching loop: admit waiting requests between steps, schedule
// a step under the token budget (decodes first, then chunks of prefills), run the decoder
// once over the flat batch, sample, stream, retire finished sequences, preempt (by
// recompute) when the KV cache is full. For a VLM, prompts carry media items whose encoder
// rows (from the media cache, else encoded in batches) fill the image-token positions, and
// the prefix cache keys those blocks by their media. Knobs: docs/configuration.md "chat".
#pragma once

#include "serving/engine.h"

namespace prism::engines::generate {

// Registers task "chat": GenerateFrontend + GenerateEngine over models/llama, or over a
// vision-language model's language model and media encoder (models/vlm).
void register_generate_engine(serving::EngineFactories& factories);

}  // namespace prism::engines::generate
